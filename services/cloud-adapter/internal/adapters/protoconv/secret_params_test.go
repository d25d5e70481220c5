package protoconv_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/sealed"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/app"
)

// Secret parameters travel sealed and are merged, opened, into the
// parameters of the cloud call only here.
func TestCreateOpensSecretParameters(t *testing.T) {
	key, err := sealed.NewKey(bytes.Repeat([]byte{3}, sealed.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	open := func(name, token string) (string, error) {
		return key.OpenString(sealed.PurposeTemplateParameter, name, token)
	}
	tok, _ := key.SealString(sealed.PurposeTemplateParameter, "LoginSettings", `{"Password":"pw-secret-1"}`)

	h := newHarness(t, func(o *app.Options) { o.OpenParameter = open })
	c := createCmd(1)
	c.SecretParameters = map[string]string{"LoginSettings": tok}
	if err := h.svc.Create(context.Background(), c, first); err != nil {
		t.Fatal(err)
	}
	calls := h.cloud.Calls().Create
	equal(t, "create calls", len(calls), 1)
	equal(t, "parameters", calls[0].Parameters, `{"InstanceType":"S5.SMALL1","LoginSettings":{"Password":"pw-secret-1"}}`)

	for name, tc := range map[string]struct {
		open   func(string, string) (string, error)
		params map[string]string
	}{
		"moved to another parameter": {open, map[string]string{"Other": tok}},
		"no key":                     {nil, map[string]string{"LoginSettings": tok}},
		"plaintext":                  {open, map[string]string{"LoginSettings": `{"Password":"pw-secret-1"}`}},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, func(o *app.Options) { o.OpenParameter = tc.open })
			c := createCmd(1)
			c.SecretParameters = tc.params
			if err := h.svc.Create(context.Background(), c, first); err != nil {
				t.Fatal(err)
			}
			equal(t, "create calls", len(h.cloud.Calls().Create), 0)
			evs := h.events.All()
			equal(t, "events", len(evs), 1)
			f := evs[0].Event.GetCreateFailed()
			if f == nil || strings.Contains(f.GetError().String(), "pw-secret") {
				t.Fatalf("event = %v", evs[0].Event)
			}
		})
	}
}
