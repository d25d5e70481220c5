package metrics_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/metrics"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/natsreq"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"
)

func TestInstrumentLifecycle(t *testing.T) {
	reg := prometheus.NewRegistry()
	fake := &natsreq.Fake{}
	l := metrics.InstrumentLifecycle(fake, reg)
	inc := ports.Request{Op: ports.IncreaseSize{Group: "g", Delta: 1}}
	fake.FailNext(domain.Errorf(contract.CodeUnavailable, "no leader"))
	if _, err := l.Do(context.Background(), inc); domain.CodeOf(err) != contract.CodeUnavailable {
		t.Fatalf("decorator changed the error: %v", err)
	}
	if _, err := l.Do(context.Background(), inc); err != nil {
		t.Fatal(err)
	}
	const want = `
# HELP nodesmith_gateway_lifecycle_requests_total Operations sent to lifecycle, by operation and result code.
# TYPE nodesmith_gateway_lifecycle_requests_total counter
nodesmith_gateway_lifecycle_requests_total{code="ok",op="increase_size"} 1
nodesmith_gateway_lifecycle_requests_total{code="unavailable",op="increase_size"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "nodesmith_gateway_lifecycle_requests_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "nodesmith_gateway_lifecycle_request_duration_seconds"); n != 1 {
		t.Fatalf("duration series = %d", n)
	}
}

func TestReadModelGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	rm := app.NewReadModel()
	metrics.RegisterReadModel(reg, rm)
	rm.MarkSynced(app.BucketGroups, nil)
	rm.MarkSynced(app.BucketInstances, nil)
	rm.MarkSynced(app.BucketCatalog, nil)
	rm.Skip(app.BucketInstances, 7)
	const want = `
# HELP nodesmith_gateway_readmodel_revision Last applied KV revision, by bucket.
# TYPE nodesmith_gateway_readmodel_revision gauge
nodesmith_gateway_readmodel_revision{bucket="groups"} 0
nodesmith_gateway_readmodel_revision{bucket="instances"} 7
# HELP nodesmith_gateway_readmodel_synced 1 once both buckets' initial values are loaded.
# TYPE nodesmith_gateway_readmodel_synced gauge
nodesmith_gateway_readmodel_synced 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "nodesmith_gateway_readmodel_revision", "nodesmith_gateway_readmodel_synced"); err != nil {
		t.Fatal(err)
	}
}
