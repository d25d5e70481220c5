package fakelifecycle_test

import (
	"context"
	"testing"

	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/fakelifecycle"
	"github.com/nodesmith/nodesmith/services/api-gateway/opstest"
)

// TestContract holds the fake to lifecycle's operations contract; dev/opscontract
// runs the same suite against the real lifecycle service.
func TestContract(t *testing.T) {
	env := natstest.Start(t)
	r, err := fakelifecycle.Start(context.Background(), env.Conn, env.JS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	if _, err := r.PutGroup(context.Background(), &statev1.NodeGroup{Id: "from-config", MaxSize: 3, Source: "config"}); err != nil {
		t.Fatal(err)
	}
	gw, _ := env.ConnectAs(t, natsauth.APIGateway)
	tg := opstest.Target{Conn: gw, Template: &statev1.InstanceTemplate{Name: "small"}, ConfigGroup: "from-config"}
	tg.WaitReady(t)
	opstest.Run(t, tg)
}
