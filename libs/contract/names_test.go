package contract

import (
	"strings"
	"testing"
)

func TestValidGroupID(t *testing.T) {
	for id, ok := range map[string]bool{
		"workers": true, "a": true, "gpu-a100-1": true, strings.Repeat("a", MaxGroupIDLength): true,
		"": false, strings.Repeat("a", MaxGroupIDLength+1): false, "Workers": false, "w_1": false,
		"w.1": false, "-w": false, "w-": false, "w 1": false,
	} {
		if got := ValidGroupID(id); (got == "") != ok {
			t.Errorf("ValidGroupID(%q) = %q, want ok=%v", id, got, ok)
		}
	}
}

func TestValidName(t *testing.T) {
	for name, ok := range map[string]bool{
		"default": true, "S5.MEDIUM4": true, "join_v2": true, "a": true, strings.Repeat("a", MaxNameLength): true,
		"": false, strings.Repeat("a", MaxNameLength+1): false, "a..b": false, ".a": false, "a.": false,
		"a b": false, "a/b": false, "a*": false, "a>": false,
	} {
		if got := ValidName(name); (got == "") != ok {
			t.Errorf("ValidName(%q) = %q, want ok=%v", name, got, ok)
		}
	}
}

func TestHookKindNames(t *testing.T) {
	for k, want := range map[HookKind]string{HookUnspecified: "unspecified", HookAfterCreated: "after_created", HookBeforeDelete: "before_delete", 7: "unspecified"} {
		if got := k.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(k), got, want)
		}
	}
}
