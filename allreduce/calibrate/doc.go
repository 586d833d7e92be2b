// Package calibrate fits the cost model (package cost) to measurements
// and compares the model with them:
//
//   - the link fit of ring-exchange times (FitLink, PingSizes) and γ, the
//     reducing steps' extra time per byte (LargeSizes, FitGamma), with
//     their report (Exchange, WriteExchange);
//   - the rounds of a calibration's sweep: each cell's median
//     (CellMedians) and each round's pace against them (RoundPaces,
//     WriteDrift, DriftLimit);
//   - the refit of a model to the algorithms' measured all-reduce times
//     (Timing, Samples, RefitWithCores: coordinate descent over the
//     model's rates, sizes and factors, with and without the cores
//     bound), the refit for Auto's choices (RefitForChoices: the
//     misrankings of the fitted model as a penalty) and the check of
//     Auto's picks against the fastest measured (AutoPicks), with the
//     reports cmd/bench -calibrate prints (WriteAccuracy, PrintRefit,
//     PrintAutoPicks, WriteRatios);
//   - earlier runs' times against a model's predictions (Predicted,
//     WriteComparison), cmd/bench -compare's table.
//
// A Sample is one measured all-reduce (NewSample); the command measures
// and reads files, this package fits and reports. It links neither a
// transport nor Go's testing package.
package calibrate
