package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/nodesmith/nodesmith/libs/restapi"
)

// Kind is a kind of object apply writes.
type Kind string

// The kinds apply knows, with their REST collections.
const (
	KindNodeGroup        Kind = "NodeGroup"
	KindInstanceTemplate Kind = "InstanceTemplate"
	KindCloudAccount     Kind = "CloudAccount"
	KindHook             Kind = "Hook"
)

// Kinds lists the kinds in the order apply writes them (what a later
// kind refers to first).
var Kinds = []Kind{KindCloudAccount, KindHook, KindInstanceTemplate, KindNodeGroup}

// Collection is the kind's REST collection ("nodegroups", ...).
func (k Kind) Collection() string {
	switch k {
	case KindNodeGroup:
		return "nodegroups"
	case KindInstanceTemplate:
		return "templates"
	case KindCloudAccount:
		return "accounts"
	case KindHook:
		return "hooks"
	}
	return ""
}

// ParseKind returns the kind named s (case-insensitive).
func ParseKind(s string) (Kind, bool) {
	for _, k := range Kinds {
		if strings.EqualFold(string(k), s) {
			return k, true
		}
	}
	return "", false
}

func esc(s string) string { return url.PathEscape(s) }

// ListGroups returns every node group.
func (c *Client) ListGroups(ctx context.Context) ([]restapi.Group, error) {
	var out restapi.GroupList
	_, err := c.getJSON(ctx, "/nodegroups", &out)
	return out.Items, err
}

// GetGroup returns a node group and its ETag.
func (c *Client) GetGroup(ctx context.Context, id string) (restapi.Group, string, error) {
	var g restapi.Group
	tag, err := c.getJSON(ctx, "/nodegroups/"+esc(id), &g)
	return g, tag, err
}

// ScaleGroup sets a group's target size.
func (c *Client) ScaleGroup(ctx context.Context, id string, target int) (restapi.Group, error) {
	t := int64(target)
	resp, err := c.do(ctx, request{method: http.MethodPost, path: "/nodegroups/" + esc(id) + "/scale", body: restapi.ScaleRequest{TargetSize: &t}})
	if err != nil {
		return restapi.Group{}, err
	}
	var g restapi.Group
	return g, json.Unmarshal(resp.body, &g)
}

// InstanceQuery filters ListInstances.
type InstanceQuery struct {
	Group  string
	States []string
}

// ListInstances returns every instance matching q, following pages.
func (c *Client) ListInstances(ctx context.Context, q InstanceQuery) ([]restapi.Instance, error) {
	var all []restapi.Instance
	cont := ""
	for {
		v := url.Values{}
		if q.Group != "" {
			v.Set("group", q.Group)
		}
		if len(q.States) > 0 {
			v.Set("state", strings.Join(q.States, ","))
		}
		v.Set("limit", "500")
		if cont != "" {
			v.Set("continue", cont)
		}
		var page restapi.InstanceList
		if _, err := c.getJSON(ctx, "/instances?"+v.Encode(), &page); err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.Continue == "" || page.Continue == cont {
			return all, nil
		}
		cont = page.Continue
	}
}

// GetInstance returns an instance's detail (history; the hook output tail
// for admin tokens).
func (c *Client) GetInstance(ctx context.Context, id string) (restapi.Instance, error) {
	var in restapi.Instance
	_, err := c.getJSON(ctx, "/instances/"+esc(id), &in)
	return in, err
}

func (c *Client) instanceCall(ctx context.Context, method, path string) (restapi.Instance, error) {
	resp, err := c.do(ctx, request{method: method, path: path})
	if err != nil {
		return restapi.Instance{}, err
	}
	var in restapi.Instance
	return in, json.Unmarshal(resp.body, &in)
}

// RetryInstance retries an instance's current step now.
func (c *Client) RetryInstance(ctx context.Context, id string) (restapi.Instance, error) {
	return c.instanceCall(ctx, http.MethodPost, "/instances/"+esc(id)+"/retry")
}

// DeleteInstance deletes an instance. Gracefully (force false) it is a
// scale-down of that instance: the target drops by one and the
// before_delete hook (the drain) runs first. Forced, the hook is skipped.
func (c *Client) DeleteInstance(ctx context.Context, id string, force bool) (restapi.Instance, error) {
	if force {
		return c.instanceCall(ctx, http.MethodDelete, "/instances/"+esc(id))
	}
	return c.instanceCall(ctx, http.MethodPost, "/instances/"+esc(id)+"/delete")
}

// ListTemplates returns every named instance template.
func (c *Client) ListTemplates(ctx context.Context) ([]restapi.TemplateInfo, error) {
	var out restapi.TemplateList
	_, err := c.getJSON(ctx, "/templates", &out)
	return out.Items, err
}

// GetTemplate returns a template and its ETag (empty for a template only
// defined inline in groups).
func (c *Client) GetTemplate(ctx context.Context, name string) (restapi.TemplateInfo, string, error) {
	var t restapi.TemplateInfo
	tag, err := c.getJSON(ctx, "/templates/"+esc(name), &t)
	return t, tag, err
}

// ListAccounts returns every cloud account.
func (c *Client) ListAccounts(ctx context.Context) ([]restapi.Account, error) {
	var out restapi.AccountList
	_, err := c.getJSON(ctx, "/accounts", &out)
	return out.Items, err
}

// GetAccount returns an account and its ETag.
func (c *Client) GetAccount(ctx context.Context, name string) (restapi.Account, string, error) {
	var a restapi.Account
	tag, err := c.getJSON(ctx, "/accounts/"+esc(name), &a)
	return a, tag, err
}

// ListHooks returns every named hook.
func (c *Client) ListHooks(ctx context.Context) ([]restapi.HookInfo, error) {
	var out restapi.HookList
	_, err := c.getJSON(ctx, "/hooks", &out)
	return out.Items, err
}

// GetHook returns a hook and its ETag.
func (c *Client) GetHook(ctx context.Context, name string) (restapi.HookInfo, string, error) {
	var h restapi.HookInfo
	tag, err := c.getJSON(ctx, "/hooks/"+esc(name), &h)
	return h, tag, err
}

// Transitions returns the newest state transitions (of one group when
// group is set), newest first.
func (c *Client) Transitions(ctx context.Context, group string, limit int) ([]restapi.TransitionEntry, error) {
	v := url.Values{}
	if group != "" {
		v.Set("group", group)
	}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	var out restapi.TransitionList
	_, err := c.getJSON(ctx, "/transitions?"+v.Encode(), &out)
	return out.Items, err
}

// ResourceETag reads the current ETag of a kind's object; found is false
// when it does not exist.
func (c *Client) ResourceETag(ctx context.Context, kind Kind, name string) (etag string, found bool, err error) {
	if kind.Collection() == "" {
		return "", false, fmt.Errorf("unknown kind %q", kind)
	}
	resp, err := c.do(ctx, request{method: http.MethodGet, path: "/" + kind.Collection() + "/" + esc(name)})
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return "", false, nil
		}
		return "", false, err
	}
	return resp.header.Get("ETag"), true, nil
}

// Precondition is the condition of a write.
type Precondition struct {
	// IfMatch: replace only the object at this ETag.
	IfMatch string
	// IfNoneMatch: create only (the object must not exist).
	IfNoneMatch bool
}

// PutResult is the answer of Put.
type PutResult struct {
	ETag    string
	Created bool
	// Warnings are the answer's Warning headers' texts (a deprecated
	// field name used, for instance).
	Warnings []string
}

// warnings returns the texts of Warning headers ("299 - \"text\"").
func warnings(h http.Header) []string {
	var out []string
	for _, v := range h.Values("Warning") {
		_, text, ok := strings.Cut(v, " - ")
		if !ok {
			text = v
		}
		if u, err := strconv.Unquote(text); err == nil {
			text = u
		}
		out = append(out, text)
	}
	return out
}

// Put writes spec (the body of PUT /<collection>/<name>, in the REST
// API's JSON shape) under cond. A stale If-Match is a 412 (ErrConflict,
// PreconditionFailed); creating what exists is a 409.
func (c *Client) Put(ctx context.Context, kind Kind, name string, spec json.RawMessage, cond Precondition) (PutResult, error) {
	if kind.Collection() == "" {
		return PutResult{}, fmt.Errorf("unknown kind %q", kind)
	}
	h := map[string]string{}
	if cond.IfMatch != "" {
		h["If-Match"] = cond.IfMatch
	}
	if cond.IfNoneMatch {
		// The API creates when If-Match is absent; say so explicitly too.
		h["If-None-Match"] = "*"
	}
	resp, err := c.do(ctx, request{method: http.MethodPut, path: "/" + kind.Collection() + "/" + esc(name), body: spec, header: h})
	if err != nil {
		return PutResult{}, err
	}
	return PutResult{ETag: resp.header.Get("ETag"), Created: resp.status == http.StatusCreated, Warnings: warnings(resp.header)}, nil
}
