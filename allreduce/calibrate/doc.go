// Package calibrate fits the cost model (package cost) to measurements:
// the link fit of ring-exchange times (FitLink, PingSizes), the refit of
// a model to the algorithms' measured all-reduce times (RefitWithCores:
// coordinate descent over the model's rates, sizes and factors, with and
// without the cores bound), the refit for Auto's choices (RefitForChoices:
// the misrankings of the fitted model as a penalty) and the check of
// Auto's picks against the fastest measured (AutoPicks), with the reports
// cmd/bench -calibrate prints (PrintRefit, PrintAutoPicks, WriteRatios).
//
// A Sample is one measured all-reduce (NewSample); the command measures,
// this package fits and reports. It links neither a transport nor Go's
// testing package.
package calibrate
