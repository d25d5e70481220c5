package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/cli"
	"github.com/nodesmith/nodesmith/libs/restapi"
)

const (
	adminToken  = "admin-token-for-tests"
	readerToken = "reader-token-for-tests"
)

// fakeGateway is an in-memory stand-in for the gateway's REST API with
// its ETag rules: PUT without If-Match only creates, If-Match "<rev>"
// replaces that revision (412 otherwise).
type fakeGateway struct {
	t   testing.TB
	srv *httptest.Server

	mu        sync.Mutex
	rev       uint64
	objects   map[string]map[string]*fakeObject // collection -> name
	instances []restapi.Instance
	puts      []fakePut

	// watch, when set, serves GET /watch.
	watch http.HandlerFunc
}

type fakeObject struct {
	rev  uint64
	spec map[string]any
}

type fakePut struct {
	path, ifMatch, ifNoneMatch string
	status                     int
}

func newFakeGateway(t testing.TB) *fakeGateway {
	t.Helper()
	f := &fakeGateway{t: t, objects: map[string]map[string]*fakeObject{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func writeErr(w http.ResponseWriter, status int, code, msg string, details map[string]any) {
	if details == nil {
		details = map[string]any{}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": code, "message": msg, "details": details})
}

func writeOK(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// put stores an object directly (another writer), returning its revision.
func (f *fakeGateway) put(collection, name string, spec map[string]any) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.putLocked(collection, name, spec)
}

func (f *fakeGateway) putLocked(collection, name string, spec map[string]any) uint64 {
	if f.objects[collection] == nil {
		f.objects[collection] = map[string]*fakeObject{}
	}
	f.rev++
	f.objects[collection][name] = &fakeObject{rev: f.rev, spec: spec}
	return f.rev
}

func (f *fakeGateway) view(collection, name string, o *fakeObject) any {
	switch collection {
	case "nodegroups":
		g := restapi.Group{ID: name, Revision: o.rev, Instances: map[string]int{}}
		num := func(k string) int32 { v, _ := o.spec[k].(float64); return int32(v) }
		g.MinSize, g.MaxSize, g.TargetSize = num("minSize"), num("maxSize"), num("targetSize")
		if it, ok := o.spec["instanceTemplate"].(map[string]any); ok {
			name, _ := it["name"].(string)
			provider, _ := it["provider"].(string)
			g.InstanceTemplate = &restapi.InstanceTemplate{Name: name, Provider: provider}
		}
		if hooks, ok := o.spec["hooks"].(map[string]any); ok {
			g.Hooks = map[string]restapi.Hook{}
			for phase, h := range hooks {
				hm, _ := h.(map[string]any)
				name, _ := hm["name"].(string)
				script, _ := hm["script"].(string)
				g.Hooks[phase] = restapi.Hook{Name: name, HasScript: script != ""}
			}
		}
		if nt, ok := o.spec["nodeTemplate"].(map[string]any); ok {
			labels := map[string]string{}
			if l, ok := nt["labels"].(map[string]any); ok {
				for k, v := range l {
					labels[k], _ = v.(string)
				}
			}
			g.NodeTemplate = &restapi.NodeTemplate{Labels: labels}
		}
		for _, in := range f.instances {
			if in.Group == name {
				g.Instances[in.State]++
			}
		}
		return g
	case "templates":
		t := restapi.TemplateInfo{Source: "api", Groups: []string{}}
		t.Name = name
		t.Account, _ = o.spec["account"].(string)
		t.InstanceType, _ = o.spec["instanceType"].(string)
		t.Zone, _ = o.spec["zone"].(string)
		t.CapacityType, _ = o.spec["capacityType"].(string)
		t.MaxPrice, _ = o.spec["maxPrice"].(string)
		t.OfferingStrategy, _ = o.spec["offeringStrategy"].(string)
		if os, ok := o.spec["offerings"]; ok {
			b, _ := json.Marshal(os)
			_ = json.Unmarshal(b, &t.Offerings)
		}
		_, t.HasParameters = o.spec["parameters"]
		if env, ok := o.spec["hookEnv"].(map[string]any); ok {
			t.HookEnv = map[string]string{}
			for k := range env {
				t.HookEnv[k] = "(sealed)"
			}
		}
		return t
	case "accounts":
		return restapi.Account{Name: name, Source: "api", Regions: []string{}, Templates: []string{}, Groups: []string{}}
	}
	return restapi.HookInfo{Hook: restapi.Hook{Name: name, HasScript: true}, Source: "api", Groups: []string{}}
}

func (f *fakeGateway) serve(w http.ResponseWriter, r *http.Request) {
	role := ""
	switch r.Header.Get("Authorization") {
	case "Bearer " + adminToken:
		role = "admin"
	case "Bearer " + readerToken:
		role = "reader"
	default:
		writeErr(w, 401, "unauthenticated", "invalid bearer token", nil)
		return
	}
	if r.Method != http.MethodGet && role != "admin" {
		writeErr(w, 403, "permission_denied", "this token is read-only", map[string]any{"role": "read-only"})
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/api/v1/")
	parts := strings.Split(path, "/")
	if path == "watch" {
		if f.watch == nil {
			writeErr(w, 404, "not_found", "no such route: "+r.URL.Path, nil)
			return
		}
		f.watch(w, r)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case parts[0] == "instances":
		f.serveInstances(w, r, parts, role)
	case parts[0] == "transitions":
		writeOK(w, 200, map[string]any{"items": []restapi.TransitionEntry{{Instance: "web-1", Group: "web", Transition: restapi.Transition{From: "PENDING", To: "CREATING", Reason: "dispatched"}}}})
	case len(parts) == 3 && parts[0] == "nodegroups" && parts[2] == "scale" && r.Method == http.MethodPost:
		o := f.objects["nodegroups"][parts[1]]
		if o == nil {
			writeErr(w, 404, "not_found", fmt.Sprintf("node group %q not found", parts[1]), nil)
			return
		}
		var body struct {
			TargetSize int `json:"targetSize"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		o.spec["targetSize"] = float64(body.TargetSize)
		f.rev++
		o.rev = f.rev
		writeOK(w, 200, f.view("nodegroups", parts[1], o))
	case len(parts) == 1:
		var items []any
		for name, o := range f.objects[parts[0]] {
			items = append(items, f.view(parts[0], name, o))
		}
		writeOK(w, 200, map[string]any{"items": items})
	case len(parts) == 2 && r.Method == http.MethodGet:
		o := f.objects[parts[0]][parts[1]]
		if o == nil {
			writeErr(w, 404, "not_found", fmt.Sprintf("%s %q not found", parts[0], parts[1]), nil)
			return
		}
		w.Header().Set("ETag", `"`+strconv.FormatUint(o.rev, 10)+`"`)
		writeOK(w, 200, f.view(parts[0], parts[1], o))
	case len(parts) == 2 && r.Method == http.MethodPut:
		f.servePut(w, r, parts[0], parts[1])
	default:
		writeErr(w, 404, "not_found", "no such route: "+r.URL.Path, nil)
	}
}

func (f *fakeGateway) servePut(w http.ResponseWriter, r *http.Request, collection, name string) {
	ifMatch := r.Header.Get("If-Match")
	p := fakePut{path: collection + "/" + name, ifMatch: ifMatch, ifNoneMatch: r.Header.Get("If-None-Match")}
	defer func() { f.puts = append(f.puts, p) }()
	var spec map[string]any
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(&spec); err != nil {
		p.status = 400
		writeErr(w, 400, "invalid_argument", "malformed JSON", nil)
		return
	}
	if _, bad := spec["bogus"]; bad {
		p.status = 400
		writeErr(w, 400, "invalid_argument", `unknown field "bogus"`, map[string]any{"field": "bogus"})
		return
	}
	cur := f.objects[collection][name]
	switch {
	case name == "from-config" && cur != nil:
		p.status = 412
		writeErr(w, 412, "failed_precondition", fmt.Sprintf("node group %q is defined in the configuration file; change it there", name), nil)
		return
	case ifMatch == "" && cur != nil:
		p.status = 409
		writeErr(w, 409, "already_exists", fmt.Sprintf("%q already exists", name), nil)
		return
	case ifMatch != "" && cur == nil:
		p.status = 404
		writeErr(w, 404, "not_found", fmt.Sprintf("%q not found", name), nil)
		return
	case ifMatch != "" && ifMatch != `"`+strconv.FormatUint(cur.rev, 10)+`"`:
		p.status = 412
		writeErr(w, 412, "aborted", fmt.Sprintf("%q is at revision %d", name, cur.rev), nil)
		return
	}
	rev := f.putLocked(collection, name, spec)
	w.Header().Set("ETag", `"`+strconv.FormatUint(rev, 10)+`"`)
	p.status = 200
	if cur == nil {
		p.status = 201
	}
	writeOK(w, p.status, f.view(collection, name, f.objects[collection][name]))
}

func (f *fakeGateway) serveInstances(w http.ResponseWriter, r *http.Request, parts []string, role string) {
	find := func(id string) int {
		for i, in := range f.instances {
			if in.ID == id {
				return i
			}
		}
		return -1
	}
	if len(parts) == 1 {
		var items []restapi.Instance
		states := r.URL.Query().Get("state")
		for _, in := range f.instances {
			if g := r.URL.Query().Get("group"); g != "" && in.Group != g {
				continue
			}
			if states != "" && !strings.Contains(","+states+",", ","+in.State+",") {
				continue
			}
			in.History, in.HookOutputTail = nil, nil
			items = append(items, in)
		}
		writeOK(w, 200, map[string]any{"items": items})
		return
	}
	i := find(parts[1])
	if i < 0 {
		writeErr(w, 404, "not_found", fmt.Sprintf("instance %q not found", parts[1]), nil)
		return
	}
	in := f.instances[i]
	switch {
	case len(parts) == 2 && r.Method == http.MethodGet:
	case len(parts) == 2 && r.Method == http.MethodDelete:
		f.instances[i].State = "DELETING"
		in = f.instances[i]
	case len(parts) == 3 && parts[2] == "delete" && r.Method == http.MethodPost:
		f.instances[i].State, f.instances[i].Released = "PENDING_DELETION", true
		in = f.instances[i]
	case len(parts) == 3 && parts[2] == "retry" && r.Method == http.MethodPost:
	default:
		writeErr(w, 404, "not_found", "no such route", nil)
		return
	}
	if role != "admin" {
		in.HookOutputTail = nil
	}
	writeOK(w, 200, in)
}

// ctl runs nodesmithctl in-process against the fake with token, and
// returns its exit code, standard output and standard error.
func (f *fakeGateway) ctl(t testing.TB, token string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	return runCtl(t, append([]string{"--server", f.srv.URL, "--token-file", tokenFile(t, token), "--config", filepath.Join(t.TempDir(), "none.yaml")}, args...), stdin)
}

func runCtl(t testing.TB, args []string, stdin string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func tokenFile(t testing.TB, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
