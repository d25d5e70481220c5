package fake_test

import (
	"testing"

	"github.com/nodesmith/nodesmith/services/hook-runner/internal/adapters/fake"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/adapters/resulttest"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
)

func TestResultPublisherContract(t *testing.T) {
	resulttest.Run(t, func(*testing.T) resulttest.Harness {
		p := &fake.Publisher{}
		return resulttest.Harness{Publisher: p, Stored: func(_ *testing.T, instance string) []domain.Result {
			var out []domain.Result
			for _, r := range p.Stored() {
				if r.InstanceID == instance {
					out = append(out, r)
				}
			}
			return out
		}}
	})
}
