package rest

import (
	"testing"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// Adopted instances are shown as such, from the field or, for records
// written before it, from the batch id lifecycle used to mark them.
func TestInstanceJSONAdopted(t *testing.T) {
	tests := []struct {
		name string
		rec  *domain.Instance
		want bool
	}{
		{"field", &domain.Instance{ID: "i", Adopted: true}, true},
		{"legacy batch id", &domain.Instance{ID: "i", BatchID: "adopted"}, true},
		{"created by a batch", &domain.Instance{ID: "i", BatchID: "b-1"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := instanceJSON(app.InstanceView{Record: tc.rec}, false).Adopted; got != tc.want {
				t.Errorf("adopted = %v, want %v", got, tc.want)
			}
		})
	}
}

// The detail names the trace of the operation that created the instance
// (from its W3C traceparent), and nothing for a malformed one.
func TestInstanceTraceID(t *testing.T) {
	for tp, want := range map[string]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": "4bf92f3577b34da6a3ce929d0e0e4736",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01": "",
		"garbage": "",
		"":        "",
	} {
		v := app.InstanceView{Record: &domain.Instance{ID: "i", TraceParent: tp}}
		if got := instanceJSON(v, true).TraceID; got != want {
			t.Errorf("traceparent %q: traceID %q, want %q", tp, got, want)
		}
	}
}
