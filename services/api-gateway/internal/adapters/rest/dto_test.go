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
