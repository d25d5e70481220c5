package rest

import (
	"testing"

	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
)

// Adopted instances are shown as such, from the field or, for records
// written before it, from the batch id lifecycle used to mark them.
func TestInstanceJSONAdopted(t *testing.T) {
	tests := []struct {
		name string
		rec  *statev1.Instance
		want bool
	}{
		{"field", &statev1.Instance{Id: "i", Adopted: true}, true},
		{"legacy batch id", &statev1.Instance{Id: "i", BatchId: "adopted"}, true},
		{"created by a batch", &statev1.Instance{Id: "i", BatchId: "b-1"}, false},
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
		v := app.InstanceView{Record: &statev1.Instance{Id: "i", TraceContext: map[string]string{"traceparent": tp}}}
		if got := instanceJSON(v, true).TraceID; got != want {
			t.Errorf("traceparent %q: traceID %q, want %q", tp, got, want)
		}
	}
}
