package ddp

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseCompress(t *testing.T) {
	for in, want := range map[string]CompressSpec{
		"":              {Kind: "none"},
		"none":          {Kind: "none"},
		"bf16":          {Kind: "bf16"},
		"fp16":          {Kind: "fp16"},
		"auto":          {Kind: "auto"},
		"powersgd":      {Kind: "powersgd", Rank: 1, StartIter: DefaultPowerSGDStart},
		"powersgd:4":    {Kind: "powersgd", Rank: 4, StartIter: DefaultPowerSGDStart},
		"powersgd:2:0":  {Kind: "powersgd", Rank: 2, StartIter: 0},
		"powersgd:8:50": {Kind: "powersgd", Rank: 8, StartIter: 50},
	} {
		got, err := ParseCompress(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
		h, err := NewCompressHook[float32](got, nil, nil)
		require.NoError(t, err, in)
		require.Equal(t, got.Kind == "none", h == nil, in)
	}
	for in, want := range map[string]string{
		"gzip":           "unknown compression",
		"bf16:2":         "takes no arguments",
		"powersgd:0":     "rank \"0\"",
		"powersgd:x":     "rank \"x\"",
		"powersgd:2:-1":  "start step \"-1\"",
		"powersgd:1:2:3": "want powersgd[:rank[:start]]",
	} {
		_, err := ParseCompress(in)
		require.ErrorContains(t, err, want, in)
	}
}
