// Package opstest is the contract of lifecycle's operations as the API
// gateway sends them (lifecyclev1.Request on messaging.SubjectLifecycleOps):
// one suite run against the gateway's fake lifecycle and against the real
// lifecycle service over real NATS, so the fake cannot drift from the codes
// the real service answers (issue 19). It lives in the gateway module, the
// one that sends these operations, outside internal/ so the dev module
// (which can run the real lifecycle) imports it too.
package opstest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
)

// Target is a running lifecycle (real or fake) answering operations.
type Target struct {
	// Conn requests operations (as the API gateway).
	Conn *nats.Conn
	// Template is the instance template of the groups the suite creates
	// (one the target's catalog holds).
	Template *statev1.InstanceTemplate
	// ConfigGroup is a group defined in the target's configuration file.
	ConfigGroup string
	// ConfigAccount is a cloud account defined in the target's
	// configuration file.
	ConfigAccount string
}

// instances returns the records of group in the instances bucket, read as
// the gateway reads them.
func (tg Target) instances(t *testing.T, group string) []*statev1.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(tg.Conn)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, messaging.BucketInstances)
	if err != nil {
		t.Fatal(err)
	}
	// A watch, as the gateway reads (its identity may not direct-get).
	w, err := kv.Watch(ctx, group+".*", jetstream.IgnoreDeletes())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	var out []*statev1.Instance
	for e := range w.Updates() {
		if e == nil {
			break // the initial values are all delivered
		}
		in := &statev1.Instance{}
		if err := proto.Unmarshal(e.Value(), in); err != nil {
			t.Fatal(err)
		}
		out = append(out, in)
	}
	return out
}

// live returns the records of group not being deleted, failing unless
// there are n. (A real lifecycle moves them on from Pending as it
// dispatches their creation: the suite must not depend on how far.)
func (tg Target) live(t *testing.T, group string, n int) []*statev1.Instance {
	t.Helper()
	var out []*statev1.Instance
	for _, in := range tg.instances(t, group) {
		if in.GetState() < statev1.InstanceState_INSTANCE_STATE_PENDING_DELETION && !in.GetReleased() {
			out = append(out, in)
		}
	}
	if len(out) != n {
		t.Fatalf("group %q has %d live instances, want %d", group, len(out), n)
	}
	return out
}

var reqSeq atomic.Int64

// Do sends req (with a fresh request id) and returns the reply.
func (tg Target) Do(t *testing.T, req *lifecyclev1.Request) *lifecyclev1.Reply {
	t.Helper()
	req.RequestId = fmt.Sprintf("opstest-%d-%d", time.Now().UnixNano(), reqSeq.Add(1))
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := tg.Conn.Request(messaging.SubjectLifecycleOps, b, 10*time.Second)
	if err != nil {
		t.Fatalf("request %v: %v", req, err)
	}
	var reply lifecyclev1.Reply
	if err := proto.Unmarshal(msg.Data, &reply); err != nil {
		t.Fatal(err)
	}
	return &reply
}

func (tg Target) want(t *testing.T, what string, req *lifecyclev1.Request, want codes.Code) *lifecyclev1.Reply {
	t.Helper()
	r := tg.Do(t, req)
	if got := codes.Code(r.GetError().GetCode()); got != want {
		t.Errorf("%s: code %v (%q), want %v", what, got, r.GetError().GetMessage(), want)
	}
	return r
}

func (tg Target) group(id string, minSize, maxSize int32) *statev1.NodeGroup {
	return &statev1.NodeGroup{Id: id, MinSize: minSize, MaxSize: maxSize, TargetSize: minSize, InstanceTemplate: proto.Clone(tg.Template).(*statev1.InstanceTemplate)}
}

func putGroup(g *statev1.NodeGroup, rev uint64, upsert bool) *lifecyclev1.Request {
	return &lifecyclev1.Request{Op: &lifecyclev1.Request_PutGroup{PutGroup: &lifecyclev1.PutGroup{Group: g, ExpectedRevision: rev, Upsert: upsert}}}
}

func increase(g string, d int32) *lifecyclev1.Request {
	return &lifecyclev1.Request{Op: &lifecyclev1.Request_IncreaseSize{IncreaseSize: &lifecyclev1.IncreaseSize{Group: g, Delta: d}}}
}

func decrease(g string, d int32) *lifecyclev1.Request {
	return &lifecyclev1.Request{Op: &lifecyclev1.Request_DecreaseTargetSize{DecreaseTargetSize: &lifecyclev1.DecreaseTargetSize{Group: g, Delta: d}}}
}

func setTarget(g string, n int32) *lifecyclev1.Request {
	return &lifecyclev1.Request{Op: &lifecyclev1.Request_SetTargetSize{SetTargetSize: &lifecyclev1.SetTargetSize{Group: g, TargetSize: n}}}
}

func deleteNodes(g string, nodes ...*lifecyclev1.NodeRef) *lifecyclev1.Request {
	return &lifecyclev1.Request{Op: &lifecyclev1.Request_DeleteNodes{DeleteNodes: &lifecyclev1.DeleteNodes{Group: g, Nodes: nodes}}}
}

func deleteGroup(id string, rev uint64) *lifecyclev1.Request {
	return &lifecyclev1.Request{Op: &lifecyclev1.Request_DeleteGroup{DeleteGroup: &lifecyclev1.DeleteGroup{Id: id, ExpectedRevision: rev}}}
}

// Run runs every scenario against tg. Each scenario uses its own groups,
// so the target is shared.
func Run(t *testing.T, tg Target) {
	t.Run("IncreaseSize", func(t *testing.T) {
		tg.want(t, "create", putGroup(tg.group("inc", 0, 3), 0, false), codes.OK)
		tg.want(t, "within max", increase("inc", 2), codes.OK)
		tg.live(t, "inc", 2) // the new capacity's records, written before the reply
		tg.want(t, "past max", increase("inc", 2), codes.OutOfRange)
		tg.want(t, "zero delta", increase("inc", 0), codes.InvalidArgument)
		tg.want(t, "unknown group", increase("no-such-group", 1), codes.NotFound)
	})
	t.Run("DecreaseTargetSize", func(t *testing.T) {
		tg.want(t, "create", putGroup(tg.group("dec", 1, 5), 0, false), codes.OK)
		tg.want(t, "increase", increase("dec", 3), codes.OK)
		tg.want(t, "cancel pending", decrease("dec", -1), codes.OK)
		tg.live(t, "dec", 3)
		tg.want(t, "non-negative delta", decrease("dec", 1), codes.InvalidArgument)
		tg.want(t, "below min", decrease("dec", -3), codes.OutOfRange)
		tg.want(t, "unknown group", decrease("no-such-group", -1), codes.NotFound)
	})
	t.Run("SetTargetSize", func(t *testing.T) {
		tg.want(t, "create", putGroup(tg.group("set", 1, 4), 0, false), codes.OK)
		tg.want(t, "within bounds", setTarget("set", 3), codes.OK)
		tg.live(t, "set", 3)
		tg.want(t, "lower", setTarget("set", 2), codes.OK)
		tg.live(t, "set", 2) // lowering cancels the excess, as DecreaseTargetSize does
		tg.want(t, "above max", setTarget("set", 5), codes.OutOfRange)
		tg.want(t, "below min", setTarget("set", 0), codes.OutOfRange)
		tg.want(t, "unknown group", setTarget("no-such-group", 1), codes.NotFound)
	})
	t.Run("DeleteNodes", func(t *testing.T) {
		tg.want(t, "create", putGroup(tg.group("del", 1, 5), 0, false), codes.OK)
		tg.want(t, "increase", increase("del", 2), codes.OK)
		tg.want(t, "no nodes", deleteNodes("del"), codes.InvalidArgument)
		tg.want(t, "unknown node", deleteNodes("del", &lifecyclev1.NodeRef{Name: "nobody", ProviderId: "nodesmith://nowhere/nobody"}), codes.NotFound)
		tg.want(t, "unknown group", deleteNodes("no-such-group", &lifecyclev1.NodeRef{Name: "x"}), codes.NotFound)
		p := tg.live(t, "del", 3)
		ref := func(in *statev1.Instance) *lifecyclev1.NodeRef {
			return &lifecyclev1.NodeRef{ProviderId: in.GetProviderId()}
		}
		tg.want(t, "past min size", deleteNodes("del", ref(p[0]), ref(p[1]), ref(p[2])), codes.OutOfRange)
		tg.want(t, "within min size", deleteNodes("del", ref(p[0])), codes.OK)
		tg.want(t, "again (CA repeats calls)", deleteNodes("del", ref(p[0])), codes.OK)
		tg.want(t, "create other", putGroup(tg.group("del-other", 0, 5), 0, false), codes.OK)
		tg.want(t, "node of another group", deleteNodes("del-other", ref(p[1])), codes.InvalidArgument)
	})
	t.Run("PutGroup", func(t *testing.T) {
		r := tg.want(t, "create", putGroup(tg.group("put", 0, 3), 0, false), codes.OK)
		rev := r.GetGroupsRevision()
		if rev == 0 {
			t.Errorf("create: no groups revision in %v", r)
		}
		tg.want(t, "create again", putGroup(tg.group("put", 0, 3), 0, false), codes.AlreadyExists)
		tg.want(t, "stale revision", putGroup(tg.group("put", 0, 4), rev+1000, false), codes.Aborted)
		r = tg.want(t, "replace at revision", putGroup(tg.group("put", 0, 4), rev, false), codes.OK)
		if r.GetGroupsRevision() <= rev {
			t.Errorf("replace: groups revision %d, want past %d", r.GetGroupsRevision(), rev)
		}
		tg.want(t, "replace at old revision", putGroup(tg.group("put", 0, 5), rev, false), codes.Aborted)
		tg.want(t, "upsert", putGroup(tg.group("put", 0, 5), 0, true), codes.OK)
		tg.want(t, "expected revision of a missing group", putGroup(tg.group("put-missing", 0, 3), 7, false), codes.NotFound)
		tg.want(t, "min above max", putGroup(tg.group("put-bad", 4, 3), 0, false), codes.InvalidArgument)
		bad := tg.group("put-bad-target", 1, 3)
		bad.TargetSize = 0
		tg.want(t, "target below min", putGroup(bad, 0, false), codes.InvalidArgument)
		tg.want(t, "no group", &lifecyclev1.Request{Op: &lifecyclev1.Request_PutGroup{PutGroup: &lifecyclev1.PutGroup{}}}, codes.InvalidArgument)
		if tg.ConfigGroup != "" {
			tg.want(t, "config group", putGroup(tg.group(tg.ConfigGroup, 0, 3), 0, true), codes.FailedPrecondition)
		}
	})
	t.Run("DeleteGroup", func(t *testing.T) {
		r := tg.want(t, "create", putGroup(tg.group("gone", 0, 3), 0, false), codes.OK)
		rev := r.GetGroupsRevision()
		tg.want(t, "stale revision", deleteGroup("gone", rev+1000), codes.Aborted)
		tg.want(t, "increase", increase("gone", 1), codes.OK)
		tg.want(t, "with instances", deleteGroup("gone", 0), codes.FailedPrecondition)
		tg.want(t, "create empty", putGroup(tg.group("gone-empty", 0, 3), 0, false), codes.OK)
		tg.want(t, "delete", deleteGroup("gone-empty", 0), codes.OK)
		tg.want(t, "delete again", deleteGroup("gone-empty", 0), codes.NotFound)
		if tg.ConfigGroup != "" {
			tg.want(t, "config group", deleteGroup(tg.ConfigGroup, 0), codes.FailedPrecondition)
		}
	})
	t.Run("InstanceAction", func(t *testing.T) {
		act := func(id string, a lifecyclev1.InstanceAction_Action) *lifecyclev1.Request {
			return &lifecyclev1.Request{Op: &lifecyclev1.Request_InstanceAction{InstanceAction: &lifecyclev1.InstanceAction{InstanceId: id, Action: a}}}
		}
		tg.want(t, "unknown instance", act("i-no-such", lifecyclev1.InstanceAction_ACTION_FORCE_DELETE), codes.NotFound)
		tg.want(t, "create", putGroup(tg.group("act", 0, 5), 0, false), codes.OK)
		tg.want(t, "increase", increase("act", 2), codes.OK)
		p := tg.live(t, "act", 2)
		// Retry's answer depends on how far the instance got (Pending with
		// nothing to retry, or a creation in flight re-issued): no
		// scenario here can pin that state on a real lifecycle without
		// workers, so only the unknown instance is held.
		tg.want(t, "retry unknown instance", act("i-no-such", lifecyclev1.InstanceAction_ACTION_RETRY), codes.NotFound)
		tg.want(t, "force-delete", act(p[0].GetId(), lifecyclev1.InstanceAction_ACTION_FORCE_DELETE), codes.OK)
		tg.want(t, "force-delete again", act(p[0].GetId(), lifecyclev1.InstanceAction_ACTION_FORCE_DELETE), codes.FailedPrecondition)
		tg.want(t, "unspecified action", act(p[1].GetId(), lifecyclev1.InstanceAction_ACTION_UNSPECIFIED), codes.InvalidArgument)
	})
	t.Run("CatalogEntry", func(t *testing.T) {
		account := func(name string, regions ...string) *statev1.CatalogEntry {
			return &statev1.CatalogEntry{Entry: &statev1.CatalogEntry_Account{Account: &statev1.CloudAccount{Name: name, Regions: regions}}}
		}
		put := func(e *statev1.CatalogEntry, rev uint64, upsert bool) *lifecyclev1.Request {
			return &lifecyclev1.Request{Op: &lifecyclev1.Request_PutCatalogEntry{PutCatalogEntry: &lifecyclev1.PutCatalogEntry{Entry: e, ExpectedRevision: rev, Upsert: upsert}}}
		}
		del := func(name string, rev uint64) *lifecyclev1.Request {
			return &lifecyclev1.Request{Op: &lifecyclev1.Request_DeleteCatalogEntry{DeleteCatalogEntry: &lifecyclev1.DeleteCatalogEntry{
				Kind: lifecyclev1.CatalogKind_CATALOG_KIND_ACCOUNT, Name: name, ExpectedRevision: rev}}}
		}
		r := tg.want(t, "create", put(account("acct", "ap-guangzhou"), 0, false), codes.OK)
		rev := r.GetCatalogRevision()
		if rev == 0 {
			t.Errorf("create: no catalog revision in %v", r)
		}
		tg.want(t, "create again", put(account("acct", "ap-guangzhou"), 0, false), codes.AlreadyExists)
		tg.want(t, "stale revision", put(account("acct", "ap-shanghai"), rev+1000, false), codes.Aborted)
		r = tg.want(t, "replace at revision", put(account("acct", "ap-shanghai"), rev, false), codes.OK)
		tg.want(t, "missing at a revision", put(account("acct-missing", "ap-guangzhou"), 7, false), codes.NotFound)
		tg.want(t, "no entry", put(&statev1.CatalogEntry{}, 0, false), codes.InvalidArgument)
		tg.want(t, "delete stale revision", del("acct", r.GetCatalogRevision()+1000), codes.Aborted)
		tg.want(t, "delete", del("acct", r.GetCatalogRevision()), codes.OK)
		tg.want(t, "delete again", del("acct", 0), codes.NotFound)
		tg.want(t, "delete without a kind", &lifecyclev1.Request{Op: &lifecyclev1.Request_DeleteCatalogEntry{DeleteCatalogEntry: &lifecyclev1.DeleteCatalogEntry{Name: "acct"}}}, codes.InvalidArgument)
		if tg.ConfigAccount != "" {
			tg.want(t, "config entry", put(account(tg.ConfigAccount, "ap-guangzhou"), 0, true), codes.FailedPrecondition)
			tg.want(t, "delete config entry", del(tg.ConfigAccount, 0), codes.FailedPrecondition)
		}
	})
	t.Run("AdoptVMs", func(t *testing.T) {
		adopt := func(group string, vms ...*lifecyclev1.AdoptVM) *lifecyclev1.Request {
			return &lifecyclev1.Request{Op: &lifecyclev1.Request_AdoptVms{AdoptVms: &lifecyclev1.AdoptVMs{Group: group, Vms: vms}}}
		}
		vm := &lifecyclev1.AdoptVM{CloudId: "ins-1", NodeName: "n1", ProviderId: "tencentcloud:///ap-guangzhou-3/ins-1", PrivateIp: "10.0.0.1"}
		tg.want(t, "no group", adopt("", vm), codes.InvalidArgument)
		tg.want(t, "no VMs", adopt("no-such-group"), codes.InvalidArgument)
		tg.want(t, "unknown group", adopt("no-such-group", vm), codes.NotFound)
	})
	t.Run("ReleaseOrphans", func(t *testing.T) {
		tg.want(t, "release", &lifecyclev1.Request{Op: &lifecyclev1.Request_ReleaseOrphans{ReleaseOrphans: &lifecyclev1.ReleaseOrphans{}}}, codes.OK)
	})
	t.Run("NoOperation", func(t *testing.T) {
		tg.want(t, "empty request", &lifecyclev1.Request{}, codes.InvalidArgument)
	})
}

// WaitReady waits until the target answers operations (a real lifecycle
// answers once it leads), up to 30s.
func (tg Target) WaitReady(t *testing.T) {
	t.Helper()
	probe, err := proto.Marshal(increase("no-such-group", 1))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		msg, err := tg.Conn.Request(messaging.SubjectLifecycleOps, probe, time.Second)
		if err == nil {
			var r lifecyclev1.Reply
			if proto.Unmarshal(msg.Data, &r) == nil && codes.Code(r.GetError().GetCode()) == codes.NotFound {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the target does not answer operations: %v", err)
		}
	}
}
