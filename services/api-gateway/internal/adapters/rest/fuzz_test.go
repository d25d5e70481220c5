package rest_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// FuzzAdminAPI sends arbitrary methods, paths, queries and bodies. The
// handler must never panic, and every error must be a JSON ErrorBody.
func FuzzAdminAPI(f *testing.F) {
	fx := newFixture(f)
	fx.seed()
	fx.answerSetTarget()
	fx.answerCatalog()
	methods := []string{"GET", "POST", "DELETE", "PUT", "PATCH", "HEAD"}
	tokens := []string{"", adminToken, readOnlyToken, "bogus-token-0123456789"}
	seeds := []struct {
		method, path, body string
	}{
		{"POST", "/api/v1/nodegroups/web/scale", `{"targetSize":3}`},
		{"POST", "/api/v1/nodegroups/web/scale", `{"targetSize":1e99}`},
		{"POST", "/api/v1/nodegroups/web/scale", `[1,2,3]`},
		{"POST", "/api/v1/nodegroups/web/scale", `null`},
		{"GET", "/api/v1/instances?group=web&state=running&limit=2&continue=d2ViLmktMQ", ""},
		{"GET", "/api/v1/instances/i-1", ""},
		{"POST", "/api/v1/instances/i-1/retry", "{}"},
		{"DELETE", "/api/v1/instances/i-1", ""},
		{"GET", "/api/v1/nodegroups/%2e%2e", ""},
		{"PUT", "/api/v1/nodegroups/new", newGroup},
		{"PATCH", "/api/v1/nodegroups/web", `{"maxSize": 20, "hooks": {"afterCreated": {"script": "x"}}, "nodeTemplate": null}`},
		{"DELETE", "/api/v1/nodegroups/web", ""},
		{"PUT", "/api/v1/accounts/team", `{"provider":"tencentcloud","regions":["ap-shanghai"]}`},
		{"PUT", "/api/v1/accounts/team", `{"credentials":{"secretId":"i","secretKey":"k"},"clearCredentials":false}`},
		{"PUT", "/api/v1/templates/big", `{"account":"team","zone":"ap-shanghai-2","parameters":{"ImageId":"img-1","Placement":{"Zone":"ap-shanghai-2"}}}`},
		{"PUT", "/api/v1/templates/big", `{"account":"team","parameters":{"InstanceCount":"x","DataDisks":[{"DiskSize":"a"}]}}`},
		{"PUT", "/api/v1/hooks/join", `{"script":"kubeadm join","timeout":"5m","env":{"A":"b"},"onFailure":"BLOCK"}`},
		{"DELETE", "/api/v1/templates/big", ""},
		{"PUT", "/api/v1/nodegroups/by-name", `{"minSize":0,"maxSize":2,"instanceTemplate":{"name":"big"},"hooks":{"afterCreated":{"name":"join"}}}`},
		{"GET", "/api/v1/watch?group=web", ""},
	}
	for _, s := range seeds {
		for i, m := range methods {
			if m == s.method {
				f.Add(uint8(i), uint8(1), s.path, s.body)
			}
		}
	}
	f.Fuzz(func(t *testing.T, method, token uint8, path, body string) {
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		defer func() {
			// httptest.NewRequest panics on unparsable targets: not the
			// handler's concern.
			if p := recover(); p != nil && !strings.Contains(strings.ToLower(toString(p)), "invalid") {
				panic(p)
			}
		}()
		// The watch stream lasts until its client leaves: this one
		// leaves after a second.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, methods[int(method)%len(methods)], path, strings.NewReader(body))
		if tok := tokens[int(token)%len(tokens)]; tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		rec := httptest.NewRecorder()
		fx.h.ServeHTTP(rec, req)
		if rec.Code >= 400 && req.Method != "HEAD" {
			var e struct {
				Code    string         `json:"code"`
				Message string         `json:"message"`
				Details map[string]any `json:"details"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code == "" || e.Details == nil {
				t.Fatalf("%s %s -> %d with a non-ErrorBody: %q", req.Method, path, rec.Code, rec.Body.String())
			}
		}
	})
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if e, ok := v.(error); ok {
		return e.Error()
	}
	return ""
}
