package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/cli"
	"github.com/nodesmith/nodesmith/libs/restapi"
)

const templateAndGroup = `# a template and a group
kind: InstanceTemplate
name: small
spec:
  account: prod
  instanceType: S5.MEDIUM4
---
kind: NodeGroup
name: web
spec:
  minSize: 1
  maxSize: 10
  instanceTemplate:
    name: small
  nodeTemplate:
    labels:
      pool: web
`

// apply creates (If-None-Match: *, no If-Match), in dependency order, and
// replaces at the ETag it reads just before writing.
func TestApplyCreatesThenUpdates(t *testing.T) {
	f := newFakeGateway(t)
	code, out, errOut := f.ctl(t, adminToken, templateAndGroup, "apply", "-f", "-")
	if code != 0 {
		t.Fatalf("apply: exit %d: %s", code, errOut)
	}
	if out != "instancetemplate/small created\nnodegroup/web created\n" {
		t.Fatalf("apply output:\n%s", out)
	}
	for _, p := range f.puts {
		if p.ifMatch != "" || p.ifNoneMatch != "*" {
			t.Errorf("create %s sent If-Match %q If-None-Match %q, want none and *", p.path, p.ifMatch, p.ifNoneMatch)
		}
	}
	f.puts = nil
	code, out, errOut = f.ctl(t, adminToken, strings.Replace(templateAndGroup, "maxSize: 10", "maxSize: 12", 1), "apply", "-f", "-")
	if code != 0 || out != "instancetemplate/small configured\nnodegroup/web configured\n" {
		t.Fatalf("re-apply: exit %d: %s%s", code, out, errOut)
	}
	if len(f.puts) != 2 || f.puts[1].ifMatch != `"2"` {
		t.Fatalf("update of the group did not send If-Match with the ETag read: %+v", f.puts)
	}
}

// get -o yaml prints metadata.resourceVersion; applying that file after
// someone else changed the object is refused with exit code 4 and the
// message naming both versions; nothing is written.
func TestApplyStaleResourceVersionIsRefused(t *testing.T) {
	f := newFakeGateway(t)
	f.put("templates", "small", map[string]any{"account": "prod"})
	f.put("nodegroups", "web", map[string]any{"minSize": 1.0, "maxSize": 10.0, "targetSize": 1.0, "instanceTemplate": map[string]any{"name": "small"}})
	code, yml, errOut := f.ctl(t, readerToken, "", "get", "groups", "web", "-o", "yaml")
	if code != 0 {
		t.Fatalf("get: %d %s", code, errOut)
	}
	if !strings.HasPrefix(yml, "kind: NodeGroup\nname: web\nmetadata:\n  resourceVersion: \"2\"\nspec:\n") || !strings.Contains(yml, "maxSize: 10") || !strings.Contains(yml, "\nstatus:\n") {
		t.Fatalf("get -o yaml:\n%s", yml)
	}
	// The file as read applies cleanly (get -o yaml round-trips)...
	if code, out, errOut := f.ctl(t, adminToken, yml, "apply", "-f", "-"); code != 0 || out != "nodegroup/web configured\n" {
		t.Fatalf("apply of get's output: %d %s%s", code, out, errOut)
	}
	// ...but not once it is stale.
	f.put("nodegroups", "web", map[string]any{"minSize": 1.0, "maxSize": 20.0, "targetSize": 1.0})
	f.puts = nil
	code, out, errOut := f.ctl(t, adminToken, yml, "apply", "-f", "-")
	if code != cli.ExitConflict {
		t.Fatalf("stale apply: exit %d, want %d: %s%s", code, cli.ExitConflict, out, errOut)
	}
	want := `NodeGroup "web" was changed since you read it (resourceVersion 2, now 4): get it again and re-apply`
	if !strings.Contains(errOut, want) {
		t.Fatalf("stale apply message:\n%s\nwant %s", errOut, want)
	}
	if len(f.puts) != 1 || f.puts[0].ifMatch != `"2"` || f.puts[0].status != 412 {
		t.Fatalf("stale apply sent %+v, want one PUT with If-Match \"2\" refused", f.puts)
	}
}

// A bad document is a usage error before anything is sent; the server's
// field errors come back with their field.
func TestApplyErrors(t *testing.T) {
	f := newFakeGateway(t)
	for _, tc := range []struct{ doc, want string }{
		{"kind: Pod\nname: x\nspec: {}\n", `kind "Pod"`},
		{"kind: Hook\nspec: {}\n", "name is required"},
		{"kind: Hook\nname: x\n", "spec is required"},
		{"kind: Hook\nname: x\nspec: {}\nspecs: {}\n", `unknown field "specs"`},
	} {
		code, _, errOut := f.ctl(t, adminToken, tc.doc, "apply", "-f", "-")
		if code != cli.ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("apply %q: exit %d %q, want %d and %q", tc.doc, code, errOut, cli.ExitUsage, tc.want)
		}
	}
	if len(f.puts) != 0 {
		t.Fatalf("invalid documents were sent: %+v", f.puts)
	}
	code, _, errOut := f.ctl(t, adminToken, "kind: Hook\nname: h\nspec: {script: x, bogus: 1}\n", "apply", "-f", "-")
	if code != cli.ExitError || !strings.Contains(errOut, `unknown field "bogus"`) || !strings.Contains(errOut, "<stdin>: document 1") {
		t.Fatalf("server refusal: exit %d %s", code, errOut)
	}
	// A 412 that is not about a newer version keeps the gateway's message.
	f.put("nodegroups", "from-config", map[string]any{"minSize": 1.0})
	code, _, errOut = f.ctl(t, adminToken, "kind: NodeGroup\nname: from-config\nspec: {minSize: 2}\n", "apply", "-f", "-")
	if code != cli.ExitConflict || !strings.Contains(errOut, "defined in the configuration file") || strings.Contains(errOut, "changed since") {
		t.Fatalf("refused for another precondition: exit %d %s", code, errOut)
	}
	// Read-only tokens cannot write: exit 5.
	if code, _, errOut := f.ctl(t, readerToken, "kind: Hook\nname: h\nspec: {script: x}\n", "apply", "-f", "-"); code != cli.ExitUnauthorized || !strings.Contains(errOut, "read-only") {
		t.Fatalf("read-only apply: exit %d %s", code, errOut)
	}
}

// Exit codes follow the API's statuses.
func TestExitCodes(t *testing.T) {
	f := newFakeGateway(t)
	for _, tc := range []struct {
		token string
		args  []string
		code  int
	}{
		{adminToken, []string{"get", "groups"}, cli.ExitOK},
		{adminToken, []string{"get", "groups", "nope"}, cli.ExitNotFound},
		{adminToken, []string{"describe", "instance", "nope"}, cli.ExitNotFound},
		{"wrong-token", []string{"get", "groups"}, cli.ExitUnauthorized},
		{readerToken, []string{"scale", "web", "--to", "3"}, cli.ExitUnauthorized},
		{adminToken, []string{"get", "pods"}, cli.ExitUsage},
		{adminToken, []string{"get", "groups", "--state", "RUNNING"}, cli.ExitUsage},
		{adminToken, []string{"get", "groups", "-o", "xml"}, cli.ExitUsage},
		{adminToken, []string{"scale", "web"}, cli.ExitUsage},
		{adminToken, []string{"get", "groups", "--bogus"}, cli.ExitUsage},
		{adminToken, []string{"frobnicate"}, cli.ExitUsage},
	} {
		if code, _, errOut := f.ctl(t, tc.token, "", tc.args...); code != tc.code {
			t.Errorf("%v: exit %d, want %d (%s)", tc.args, code, tc.code, errOut)
		}
	}
}

func seedInstances(f *fakeGateway) {
	tail := "draining node web-1\ndone"
	f.put("nodegroups", "web", map[string]any{"minSize": 1.0, "maxSize": 10.0, "targetSize": 3.0, "nodeTemplate": map[string]any{"labels": map[string]any{"pool": "web"}}})
	f.put("nodegroups", "batch", map[string]any{"minSize": 0.0, "maxSize": 5.0, "targetSize": 0.0, "nodeTemplate": map[string]any{"labels": map[string]any{"pool": "batch"}}})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.instances = []restapi.Instance{
		{ID: "web-1", Group: "web", State: "RUNNING", CloudID: "ins-111", NodeName: "node-1", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
			Zone: "ap-guangzhou-4", InstanceType: "SA5.MEDIUM4", CapacityType: "spot",
			History:        []restapi.Transition{{From: "PENDING", To: "CREATING", Reason: "dispatched in batch b1", At: "2026-01-01T00:00:00Z"}, {From: "JOINED", To: "RUNNING", Reason: "after_created hook succeeded", At: "2026-01-01T00:02:00Z"}},
			HookOutputTail: &tail, LastError: &restapi.ErrorInfo{Code: "HOOK_FAILED", Message: "exit 1", Retryable: true}},
		{ID: "web-2", Group: "web", State: "CREATING"},
		{ID: "web-3", Group: "web", State: "PENDING"},
	}
}

// get's tables and filters.
func TestGetTablesAndFilters(t *testing.T) {
	f := newFakeGateway(t)
	seedInstances(f)
	code, out, errOut := f.ctl(t, readerToken, "", "get", "groups")
	if code != 0 {
		t.Fatal(errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], "batch") || strings.Join(strings.Fields(lines[2]), " ") != "web 1 10 3 1 2 0 -" {
		t.Fatalf("get groups:\n%s", out)
	}
	_, out, _ = f.ctl(t, readerToken, "", "get", "groups", "-l", "pool=batch")
	if strings.Contains(out, "web") || !strings.Contains(out, "batch") {
		t.Fatalf("get groups -l pool=batch:\n%s", out)
	}
	_, out, _ = f.ctl(t, readerToken, "", "get", "instances", "--state", "PENDING,CREATING")
	if strings.Contains(out, "web-1") || !strings.Contains(out, "web-2") || !strings.Contains(out, "web-3") {
		t.Fatalf("get instances --state:\n%s", out)
	}
	_, out, _ = f.ctl(t, readerToken, "", "get", "instances", "-l", "pool=batch")
	if strings.Contains(out, "web-") {
		t.Fatalf("get instances -l pool=batch lists web's:\n%s", out)
	}
	if code, out, errOut := f.ctl(t, readerToken, "", "get", "instances", "--state", "DELETED"); code != 0 || out != "" || errOut != "No instances found.\n" {
		t.Fatalf("nothing matching: %d %q %q", code, out, errOut)
	}
	// The default columns stay as scripts know them; where each VM was
	// created is in -o wide, last ("-" when not recorded: web-2).
	_, out, _ = f.ctl(t, readerToken, "", "get", "instances")
	if lines := strings.Split(out, "\n"); strings.Join(strings.Fields(lines[0]), " ") != "ID GROUP STATE NODE CLOUD-ID AGE" {
		t.Fatalf("get instances header changed:\n%s", out)
	}
	_, out, _ = f.ctl(t, readerToken, "", "get", "instances", "-o", "wide")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasSuffix(strings.Join(strings.Fields(lines[0]), " "), "IN-FLIGHT LAST-ERROR ZONE INSTANCE-TYPE CAPACITY") ||
		!strings.Contains(out, "HOOK_FAILED: exit 1") {
		t.Fatalf("get instances -o wide:\n%s", out)
	}
	for _, tc := range []struct{ line, suffix string }{{lines[1], "ap-guangzhou-4 SA5.MEDIUM4 spot"}, {lines[2], "false - - - -"}} {
		if !strings.HasSuffix(strings.Join(strings.Fields(tc.line), " "), tc.suffix) {
			t.Errorf("get instances -o wide: line %q does not end with %q", tc.line, tc.suffix)
		}
	}
	_, out, _ = f.ctl(t, readerToken, "", "get", "instances", "web-1", "-o", "json")
	if !strings.Contains(out, `"kind": "Instance"`) || !strings.Contains(out, `"cloudID": "ins-111"`) {
		t.Fatalf("get instance -o json:\n%s", out)
	}
}

// describe instance shows the history with reasons, cloud id, node, last
// error and trace id; the hook output only to admins.
func TestDescribeInstance(t *testing.T) {
	f := newFakeGateway(t)
	seedInstances(f)
	code, out, errOut := f.ctl(t, adminToken, "", "describe", "instance", "web-1")
	if code != 0 {
		t.Fatal(errOut)
	}
	for _, want := range []string{"ins-111", "node-1", "HOOK_FAILED: exit 1", "4bf92f3577b34da6a3ce929d0e0e4736", "after_created hook succeeded", "PENDING", "draining node web-1",
		"Zone:           ap-guangzhou-4\n", "Instance type:  SA5.MEDIUM4\n", "Capacity:       spot\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("describe instance lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = f.ctl(t, readerToken, "", "describe", "instance", "web-1")
	if strings.Contains(out, "draining node") || !strings.Contains(out, "needs an admin token") {
		t.Fatalf("read-only describe shows the hook output:\n%s", out)
	}
	// An instance created before its zone was recorded shows dashes.
	_, out, _ = f.ctl(t, readerToken, "", "describe", "instance", "web-2")
	if !strings.Contains(out, "Zone:           -\n") || !strings.Contains(out, "Capacity:       -\n") {
		t.Fatalf("describe instance without a recorded zone:\n%s", out)
	}
	code, out, errOut = f.ctl(t, readerToken, "", "describe", "group", "web")
	if code != 0 || !strings.Contains(out, "min 1, max 10, target 3") || !strings.Contains(out, "web-2") || !strings.Contains(out, "1/3 running") {
		t.Fatalf("describe group: %d %s%s", code, out, errOut)
	}
	for _, want := range []string{"ins-111 ap-guangzhou-4 SA5.MEDIUM4 spot", "web-2 CREATING - - - - -"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("describe group's instances lack %q:\n%s", want, out)
		}
	}
}

// delete goes through the graceful route unless --force; drain is delete.
func TestDeleteAndDrain(t *testing.T) {
	f := newFakeGateway(t)
	seedInstances(f)
	if code, out, errOut := f.ctl(t, adminToken, "", "delete", "web-1"); code != 0 || !strings.Contains(out, "PENDING_DELETION") || !strings.Contains(out, "before_delete") {
		t.Fatalf("delete: %d %s%s", code, out, errOut)
	}
	if code, out, errOut := f.ctl(t, adminToken, "", "drain", "web-2"); code != 0 || !strings.Contains(out, "PENDING_DELETION") {
		t.Fatalf("drain: %d %s%s", code, out, errOut)
	}
	if code, out, errOut := f.ctl(t, adminToken, "", "delete", "web-3", "--force"); code != 0 || !strings.Contains(out, "DELETING") || !strings.Contains(out, "force") {
		t.Fatalf("delete --force: %d %s%s", code, out, errOut)
	}
	if code, out, _ := f.ctl(t, adminToken, "", "scale", "web", "--to", "5"); code != 0 || !strings.Contains(out, "target 5") {
		t.Fatalf("scale: %d %s", code, out)
	}
}

// Contexts: set-context, use-context, get-contexts, current-context;
// --context and --server override; the file is private.
func TestConfigContexts(t *testing.T) {
	f := newFakeGateway(t)
	seedInstances(f)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	tok := tokenFile(t, readerToken)
	run := func(args ...string) (int, string, string) {
		return runCtl(t, append([]string{"--config", cfg}, args...), "")
	}
	if code, _, errOut := run("get", "groups"); code != cli.ExitError || !strings.Contains(errOut, "no server") {
		t.Fatalf("without a context: %d %s", code, errOut)
	}
	if code, out, errOut := run("config", "set-context", "test", "--server", f.srv.URL, "--token-file", tok); code != 0 || !strings.Contains(out, `"test" created`) {
		t.Fatalf("set-context: %d %s%s", code, out, errOut)
	}
	if code, out, _ := run("config", "set-context", "other", "--server", "http://127.0.0.1:1", "--token-file", tok); code != 0 {
		t.Fatal(out)
	}
	if _, out, _ := run("config", "current-context"); out != "test\n" {
		t.Fatalf("current-context after the first set-context: %q", out)
	}
	if code, out, errOut := run("get", "groups"); code != 0 || !strings.Contains(out, "web") {
		t.Fatalf("get through the context: %d %s%s", code, out, errOut)
	}
	if code, out, _ := run("config", "use-context", "other"); code != 0 || !strings.Contains(out, `"other"`) {
		t.Fatal(out)
	}
	if code, _, _ := run("get", "groups"); code != cli.ExitError {
		t.Fatalf("the unreachable context answered: %d", code)
	}
	if code, _, errOut := run("--context", "test", "get", "groups"); code != 0 {
		t.Fatalf("--context test: %s", errOut)
	}
	if code, _, errOut := run("--server", f.srv.URL, "get", "groups"); code != 0 {
		t.Fatalf("--server overriding the context: %s", errOut)
	}
	if code, _, errOut := run("config", "use-context", "nope"); code != cli.ExitError || !strings.Contains(errOut, `"nope"`) {
		t.Fatalf("use-context nope: %d %s", code, errOut)
	}
	_, out, _ := run("config", "get-contexts")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[2], "*") || !strings.Contains(lines[2], "other") {
		t.Fatalf("get-contexts:\n%s", out)
	}
	st, err := os.Stat(cfg)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config file mode: %v %v", st.Mode(), err)
	}
	b, _ := os.ReadFile(cfg)
	if strings.Contains(string(b), readerToken) {
		t.Fatal("the token was written into the config file")
	}
	// A relative path on the command line is relative to the working
	// directory, stored absolute.
	t.Chdir(filepath.Dir(tok))
	if code, _, errOut := run("config", "set-context", "rel", "--server", f.srv.URL, "--token-file", filepath.Base(tok)); code != 0 {
		t.Fatal(errOut)
	}
	if code, _, errOut := run("--context", "rel", "get", "groups"); code != 0 {
		t.Fatalf("relative token file: %s", errOut)
	}
	if b, _ := os.ReadFile(cfg); !strings.Contains(string(b), "token-file: "+tok) {
		t.Fatalf("relative token file stored as:\n%s", b)
	}
}

// Shell completion offers kinds, then the gateway's names; the completion
// scripts are generated.
func TestCompletion(t *testing.T) {
	f := newFakeGateway(t)
	seedInstances(f)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", "get", ""}, []string{"groups", "instances", "templates"}},
		{[]string{"__complete", "get", "groups", ""}, []string{"web", "batch"}},
		{[]string{"__complete", "describe", "instance", ""}, []string{"web-1", "web-2"}},
		{[]string{"__complete", "scale", ""}, []string{"web", "batch"}},
		{[]string{"__complete", "drain", ""}, []string{"web-3"}},
	} {
		code, out, errOut := f.ctl(t, readerToken, "", tc.args...)
		if code != 0 {
			t.Fatalf("%v: %d %s", tc.args, code, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w+"\n") {
				t.Errorf("%v: %q not offered:\n%s", tc.args, w, out)
			}
		}
	}
	if code, out, _ := f.ctl(t, readerToken, "", "completion", "bash"); code != 0 || !strings.Contains(out, "__start_nodesmithctl") {
		t.Fatalf("completion bash: %d", code)
	}
}

// A template document without the write-only fields the stored template
// holds (as get prints it) is not applied: it would drop them.
func TestApplyKeepsWriteOnlyFields(t *testing.T) {
	f := newFakeGateway(t)
	f.put("templates", "small", map[string]any{"account": "prod", "parameters": map[string]any{"ImageId": "img-1"}, "hookEnv": map[string]any{"JOIN": "s3cret"}})
	_, yml, _ := f.ctl(t, readerToken, "", "get", "templates", "small", "-o", "yaml")
	f.puts = nil
	code, _, errOut := f.ctl(t, adminToken, yml, "apply", "-f", "-")
	if code != cli.ExitError || !strings.Contains(errOut, "parameters, hookEnv") || !strings.Contains(errOut, "--drop-write-only") || len(f.puts) != 0 {
		t.Fatalf("apply without the write-only fields: exit %d %s (puts %v)", code, errOut, f.puts)
	}
	withThem := strings.Replace(yml, "spec:\n", "spec:\n  parameters: {ImageId: img-2}\n  hookEnv: {JOIN: s3cret}\n", 1)
	if code, out, errOut := f.ctl(t, adminToken, withThem, "apply", "-f", "-"); code != 0 || out != "instancetemplate/small configured\n" {
		t.Fatalf("apply with them: exit %d %s%s", code, out, errOut)
	}
	if code, _, errOut := f.ctl(t, adminToken, "kind: InstanceTemplate\nname: small\nspec: {account: prod}\n", "apply", "-f", "-", "--drop-write-only"); code != 0 {
		t.Fatalf("--drop-write-only: exit %d %s", code, errOut)
	}
}

// The same for a group's unnamed inline template and hooks.
func TestApplyKeepsGroupsInlineWriteOnlyParts(t *testing.T) {
	f := newFakeGateway(t)
	f.put("nodegroups", "inline", map[string]any{"minSize": 0.0, "maxSize": 3.0, "targetSize": 0.0,
		"instanceTemplate": map[string]any{"provider": "tencentcloud", "parameters": map[string]any{"ImageId": "img-1"}},
		"hooks":            map[string]any{"afterCreated": map[string]any{"script": "join"}, "beforeDelete": map[string]any{"name": "drain", "script": "drain"}}})
	_, yml, _ := f.ctl(t, readerToken, "", "get", "groups", "inline", "-o", "yaml")
	code, _, errOut := f.ctl(t, adminToken, yml, "apply", "-f", "-")
	if code != cli.ExitError || !strings.Contains(errOut, "instanceTemplate.parameters, hooks.afterCreated") || strings.Contains(errOut, "beforeDelete") {
		t.Fatalf("apply without the inline parts: exit %d %s", code, errOut)
	}
	if code, _, errOut := f.ctl(t, adminToken, yml, "apply", "-f", "-", "--drop-write-only"); code != 0 {
		t.Fatalf("--drop-write-only: exit %d %s", code, errOut)
	}
}

// A template's offerings and capacity show in get's wide table and YAML
// document, and the document applies back unchanged.
func TestGetTemplateShowsOfferings(t *testing.T) {
	f := newFakeGateway(t)
	f.put("templates", "multi", map[string]any{"account": "prod", "zone": "ap-guangzhou-3", "instanceType": "S5.MEDIUM4",
		"capacityType": "spot", "maxPrice": "0.5", "offeringStrategy": "balanced",
		"offerings": []any{
			map[string]any{"zone": "ap-guangzhou-3", "instanceType": "S5.MEDIUM4"},
			map[string]any{"zone": "ap-guangzhou-4", "instanceType": "S5.MEDIUM4", "subnetId": "subnet-b", "capacityType": "on-demand"},
		}})
	code, out, errOut := f.ctl(t, readerToken, "", "get", "templates", "-o", "wide")
	if code != 0 || !strings.Contains(out, "CAPACITY") || !strings.Contains(out, "spot (max 0.5)") ||
		!strings.Contains(out, "ap-guangzhou-3/S5.MEDIUM4,ap-guangzhou-4/S5.MEDIUM4/on-demand (balanced)") {
		t.Fatalf("get templates -o wide: exit %d\n%s%s", code, out, errOut)
	}
	_, yml, _ := f.ctl(t, readerToken, "", "get", "templates", "multi", "-o", "yaml")
	for _, want := range []string{"capacityType: spot", "maxPrice: \"0.5\"", "offeringStrategy: balanced", "subnetId: subnet-b"} {
		if !strings.Contains(yml, want) {
			t.Errorf("yaml lacks %q:\n%s", want, yml)
		}
	}
	f.puts = nil
	if code, out, errOut := f.ctl(t, adminToken, yml, "apply", "-f", "-"); code != 0 || !strings.Contains(out, "instancetemplate/multi") {
		t.Fatalf("apply the document back: exit %d %s%s", code, out, errOut)
	}
}
