package restapi

import (
	"errors"
	"testing"
)

// Decode and Validate never panic, and whatever they refuse is a
// FieldErrors or a JSON syntax error.
func FuzzDecodeGroup(f *testing.F) {
	for _, s := range []string{
		`{"maxSize": 1, "instanceTemplate": "t"}`,
		`{"maxSize": "x", "instanceTemplate": {"name": 1}, "hooks": {"afterCreated": []}}`,
		`{"autoscalingOptions": {"scaleDownUnneeded": "1m", "scaleDownUnneededTime": null}}`,
		`{"nodeTemplate": {"taints": [null, {"key": 1}]}, "parallelism": {"create": 1e99}}`,
		`[1]`, `null`, `"x"`, `{"minSize": -1, "maxSize": 2147483648}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var g GroupSpec
		_, err := Decode(data, &g, DecodeOptions{})
		var fe FieldErrors
		if err != nil && errors.As(err, &fe) && len(fe) == 0 {
			t.Fatal("empty FieldErrors")
		}
		if err == nil {
			_ = g.Validate()
			_ = g.ValidateIn(InFile)
		}
	})
}
