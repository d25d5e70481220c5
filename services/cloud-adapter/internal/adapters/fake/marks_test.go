package fake_test

import (
	"testing"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/fake"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/offeringstest"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

func TestMarksContract(t *testing.T) {
	offeringstest.Run(t, func(*testing.T) (ports.OfferingMarks, ports.OfferingMarks) {
		m := fake.NewMarks()
		return m, m
	})
}
