package natsauth_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/nodesmith/nodesmith/libs/messaging"
)

// checkShapesPermissions: the cloud adapter answers instance-shape
// questions (any replica, queue group) to the gateway and lifecycle; the
// hook runner may neither ask nor answer, the gateway may not answer.
func checkShapesPermissions(t *testing.T, lc, gw, ca, hr *client) {
	t.Helper()
	sub, err := ca.nc.QueueSubscribe(messaging.SubjectCloudShapes, messaging.QueueCloudShapes, func(m *nats.Msg) { _ = m.Respond([]byte("shapes")) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := ca.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cl   *client
	}{{"the gateway", gw}, {"lifecycle", lc}} {
		c.cl.allowed(t, c.name+" asks the cloud adapter for instance shapes", func(ctx context.Context) error {
			m, err := c.cl.nc.RequestWithContext(ctx, messaging.SubjectCloudShapes, []byte("q"))
			if err == nil && !bytes.Equal(m.Data, []byte("shapes")) {
				err = fmt.Errorf("reply %q", m.Data)
			}
			return err
		})
	}
	hr.forbidden(t, "the hook runner asks for instance shapes", messaging.SubjectCloudShapes, func(ctx context.Context) error {
		_, err := hr.nc.RequestWithContext(ctx, messaging.SubjectCloudShapes, []byte("q"))
		return err
	})
	hr.forbidden(t, "the hook runner answers instance-shape questions", messaging.SubjectCloudShapes, func(ctx context.Context) error {
		_, err := hr.nc.QueueSubscribeSync(messaging.SubjectCloudShapes, messaging.QueueCloudShapes)
		return err
	})
	gw.forbidden(t, "the gateway answers instance-shape questions", messaging.SubjectCloudShapes, func(ctx context.Context) error {
		_, err := gw.nc.SubscribeSync(messaging.SubjectCloudShapes)
		return err
	})
}
