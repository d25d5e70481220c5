package protoconv_test

import (
	"strings"
	"testing"
	"unicode"

	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// TestStatePinnedToProto: protoconv converts domain.State and
// statev1.InstanceState by number, so every proto value must be the domain
// state of the same name (lifecycle spells it in CamelCase), with no domain
// state the proto lacks.
func TestStatePinnedToProto(t *testing.T) {
	upperSnake := func(s string) string {
		var b strings.Builder
		for i, r := range s {
			if unicode.IsUpper(r) && i > 0 {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToUpper(r))
		}
		return b.String()
	}
	if len(statev1.InstanceState_name) != len(domain.States)+1 {
		t.Fatalf("proto has %d states, domain %d plus Unknown", len(statev1.InstanceState_name), len(domain.States))
	}
	for v, name := range statev1.InstanceState_name {
		s := domain.State(v)
		want := strings.TrimPrefix(name, "INSTANCE_STATE_")
		if v == 0 {
			if s.Valid() || want != "UNSPECIFIED" {
				t.Errorf("proto %s (0) must be the invalid zero state, got %s", name, s)
			}
			continue
		}
		if !s.Valid() || upperSnake(s.String()) != want {
			t.Errorf("proto %s (%d) is domain %s", name, v, s)
		}
	}
}

// TestHookKindPinnedToProto: hook kinds cross the bus by number; every
// proto value is the shared kind of the same name (libs/contract), and
// that name is what metrics, logs and message ids say.
func TestHookKindPinnedToProto(t *testing.T) {
	for v, name := range hookv1.HookKind_name {
		want := strings.ToLower(strings.TrimPrefix(name, "HOOK_KIND_"))
		if got := domain.HookKind(v).String(); got != want {
			t.Errorf("proto %s (%d) is %q in libs/contract, want %q", name, v, got, want)
		}
	}
	if got := domain.HookKind(len(hookv1.HookKind_name)).String(); got != "unspecified" {
		t.Errorf("a kind the proto lacks must read as unspecified, got %q", got)
	}
}
