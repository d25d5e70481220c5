package rest

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/go-chi/chi/v5"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// DefaultPageSize is the page size of list endpoints without ?limit=.
const DefaultPageSize = 100

func etag(rev uint64) string { return `"` + strconv.FormatUint(rev, 10) + `"` }

// notModified reports whether the request's If-None-Match already names
// the current revision.
func notModified(r *http.Request, tag string) bool {
	for _, t := range strings.Split(r.Header.Get("If-None-Match"), ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == tag || t == "*" {
			return true
		}
	}
	return false
}

func (h *handler) listGroups(w http.ResponseWriter, r *http.Request) {
	groups, err := h.svc.NodeGroups()
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	rev, _ := h.svc.ReadModel().Revisions()
	out := GroupList{Items: make([]Group, 0, len(groups)), Revision: rev}
	for _, g := range groups {
		out.Items = append(out.Items, h.group(g, h.svc.GroupCounts(g.Record.ID)))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) getGroup(w http.ResponseWriter, r *http.Request) {
	g, err := h.svc.Group(chi.URLParam(r, "id"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	tag := etag(g.Revision)
	w.Header().Set("ETag", tag)
	if notModified(r, tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	writeJSON(w, http.StatusOK, h.group(g, h.svc.GroupCounts(g.Record.ID)))
}

// unavailableOfferings lists every live offerings mark.
func (h *handler) unavailableOfferings(w http.ResponseWriter, r *http.Request) {
	marks, err := h.svc.UnavailableOfferings()
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := UnavailableOfferingList{Items: make([]UnavailableOffering, 0, len(marks))}
	for _, m := range marks {
		out.Items = append(out.Items, unavailableOfferingJSON(m))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) scaleGroup(w http.ResponseWriter, r *http.Request) {
	rev, anyRev, present, err := ifMatch(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var req ScaleRequest
	if err = decodeJSON(r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	if req.TargetSize == nil {
		h.writeError(w, r, newError(http.StatusBadRequest, contract.CodeInvalidArgument, "targetSize is required").with("field", "targetSize"))
		return
	}
	if *req.TargetSize < 0 || *req.TargetSize > 1<<31-1 {
		h.writeError(w, r, newError(http.StatusBadRequest, contract.CodeInvalidArgument, "targetSize must be between 0 and 2147483647").with("field", "targetSize"))
		return
	}
	id := chi.URLParam(r, "id")
	if present && !anyRev {
		// Checked against the revision this gateway sees: lifecycle's
		// SetTargetSize takes none. It stops a client that read the group
		// (a form, an apply) from setting a target on a group changed
		// since, not two scale calls racing each other.
		cur, err := h.svc.Group(id)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		if cur.Revision != rev {
			h.writeError(w, r, newError(http.StatusPreconditionFailed, contract.CodeAborted,
				fmt.Sprintf("node group %q changed: revision %d, expected %d", id, cur.Revision, rev)).with("header", "If-Match"))
			return
		}
	}
	g, err := h.svc.SetTargetSize(r.Context(), id, int32(*req.TargetSize))
	if err != nil {
		// A target the group's bounds refuse names the field.
		if c := domain.CodeOf(err); c == contract.CodeInvalidArgument || c == contract.CodeOutOfRange {
			err = newError(httpStatus(c), c, domain.MessageOf(err)).with("field", "targetSize")
		}
		h.writeError(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "node group scaled by operator", "group", id, "target", *req.TargetSize, "role", roleFrom(r).String())
	w.Header().Set("ETag", etag(g.Revision))
	writeJSON(w, http.StatusOK, h.group(g, h.svc.GroupCounts(id)))
}

func (h *handler) listInstances(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	query := app.InstanceQuery{Group: q.Get("group"), Limit: DefaultPageSize}
	// state may be repeated or comma separated: state=PENDING,CREATING.
	for _, v := range q["state"] {
		for _, s := range strings.Split(v, ",") {
			st, ok := domain.ParseInstanceState(s)
			if !ok {
				h.writeError(w, r, newError(http.StatusBadRequest, contract.CodeInvalidArgument, fmt.Sprintf("unknown state %q", s)).with("parameter", "state").with("allowed", stateNames()))
				return
			}
			query.States = append(query.States, st)
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > app.MaxPageSize {
			h.writeError(w, r, newError(http.StatusBadRequest, contract.CodeInvalidArgument, fmt.Sprintf("limit must be an integer between 1 and %d", app.MaxPageSize)).with("parameter", "limit"))
			return
		}
		query.Limit = n
	}
	if s := q.Get("continue"); s != "" {
		after, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || len(after) == 0 {
			h.writeError(w, r, newError(http.StatusBadRequest, contract.CodeInvalidArgument, "invalid continue token").with("parameter", "continue"))
			return
		}
		query.After = string(after)
	}
	page, err := h.svc.ListInstances(query)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := InstanceList{Items: make([]Instance, 0, len(page.Items)), Revision: page.Revision}
	for _, v := range page.Items {
		out.Items = append(out.Items, instanceJSON(v, false))
	}
	if page.Next != "" {
		out.Continue = base64.RawURLEncoding.EncodeToString([]byte(page.Next))
	}
	writeJSON(w, http.StatusOK, out)
}

func stateNames() []string {
	var out []string
	for _, s := range domain.InstanceStates() {
		out = append(out, s.String())
	}
	return out
}

func (h *handler) getInstance(w http.ResponseWriter, r *http.Request) {
	v, err := h.svc.Instance(chi.URLParam(r, "id"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	tag := etag(v.Revision)
	w.Header().Set("ETag", tag)
	// The body depends on the token's role.
	w.Header().Set("Vary", "Authorization")
	if notModified(r, tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	writeJSON(w, http.StatusOK, forRole(instanceJSON(v, true), roleFrom(r)))
}

// forRole drops what only admins may read from an instance: the tail of
// the last hook's output, which may hold whatever the hook printed (hosts,
// paths, tokens a careless script echoes). Read-only tokens get the field
// omitted.
func forRole(in Instance, role Role) Instance {
	if role < RoleAdmin {
		in.HookOutputTail = nil
	}
	return in
}

func (h *handler) instanceAction(action ports.InstanceActionKind, okStatus int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "id")
		v, err := h.svc.InstanceAction(r.Context(), id, action)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		h.log.InfoContext(r.Context(), "instance action by operator", "instance", id, "group", v.Group(), "action", action.String(), "role", roleFrom(r).String())
		writeJSON(w, okStatus, forRole(instanceJSON(v, true), roleFrom(r)))
	}
}

// releaseOrphans confirms that the VMs the orphan reconciler holds back are
// orphans (admin only, as every write).
func (h *handler) releaseOrphans(w http.ResponseWriter, r *http.Request) {
	if err := h.svc.ReleaseOrphans(r.Context()); err != nil {
		h.writeError(w, r, err)
		return
	}
	h.log.WarnContext(r.Context(), "orphan VMs held back by the reconciler released by an operator", "role", roleFrom(r).String())
	writeJSON(w, http.StatusAccepted, orphanRelease{Released: true})
}

func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	st := h.svc.Status()
	out := StatusView{
		Role:      roleFrom(r).String(),
		Synced:    st.Stats.GroupsSynced && st.Stats.InstancesSynced,
		Revisions: map[string]uint64{"groups": st.Stats.GroupsRevision, "instances": st.Stats.InstancesRev},
		Groups:    make([]GroupStatus, 0, len(st.Groups)),
		Totals:    countsJSON(st.Totals),
	}
	for _, g := range st.Groups {
		r := g.Group.Record
		out.Groups = append(out.Groups, GroupStatus{
			ID: r.ID, MinSize: r.MinSize, MaxSize: r.MaxSize, TargetSize: r.TargetSize,
			Instances: countsJSON(g.Counts), CreationFailed: g.CreationFailed,
		})
	}
	if o := st.Orphans; o != nil {
		out.Orphans = &OrphansView{
			Holding: o.Holding(time.Now()), HoldSince: timeJSON(o.Since), HoldUntil: timeJSON(o.Until),
			ReleasedAt: timeJSON(o.ReleasedAt), Held: o.Held, Waiting: append([]string{}, o.Waiting...),
			Release: ReleaseOrphansCall, UpdatedAt: timeJSON(o.UpdatedAt),
		}
		if !out.Orphans.Holding {
			out.Orphans.HoldSince, out.Orphans.HoldUntil = "", ""
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// decodeJSON decodes exactly one JSON object from the body into v,
// rejecting unknown fields, trailing data, bodies over the limit and
// non-JSON content types.
func decodeJSON(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return newError(http.StatusUnsupportedMediaType, contract.CodeInvalidArgument, "request body must be application/json")
		}
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &tooBig):
			return newError(http.StatusRequestEntityTooLarge, contract.CodeInvalidArgument, fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit))
		case errors.Is(err, io.EOF):
			return newError(http.StatusBadRequest, contract.CodeInvalidArgument, "request body is empty")
		case errors.As(err, &syntax):
			return newError(http.StatusBadRequest, contract.CodeInvalidArgument, "malformed JSON").with("offset", syntax.Offset)
		case errors.As(err, &typ):
			return newError(http.StatusBadRequest, contract.CodeInvalidArgument, fmt.Sprintf("field %q must be %s", typ.Field, typ.Type)).with("field", typ.Field)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return newError(http.StatusBadRequest, contract.CodeInvalidArgument, fmt.Sprintf("unknown field %q", field)).with("field", field)
		}
		return newError(http.StatusBadRequest, contract.CodeInvalidArgument, "invalid request body: "+err.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return newError(http.StatusRequestEntityTooLarge, contract.CodeInvalidArgument, fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit))
		}
		return newError(http.StatusBadRequest, contract.CodeInvalidArgument, "request body must hold a single JSON object")
	}
	return nil
}

// ReleaseOrphansCall is the admin call that releases the orphans the
// reconciler holds back (the status shows it).
const ReleaseOrphansCall = "POST /api/v1/reconciler/release-orphans"

// timeJSON renders t in RFC 3339 ("" for zero).
func timeJSON(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// deleteInstanceGracefully deletes one instance the way a Cluster
// Autoscaler scale-down does (lifecycle's DeleteNodes): the group's target
// drops by one and the instance goes through its before_delete hook (the
// drain) before its VM is terminated. DELETE /instances/{id} is the forced
// delete that skips the hook.
func (h *handler) deleteInstanceGracefully(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	v, err := h.svc.Instance(id)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	node := app.NodeRef{ProviderID: v.ReportedID, Name: v.Record.NodeName}
	if err := h.svc.DeleteNodes(r.Context(), v.Group(), []app.NodeRef{node}); err != nil {
		h.writeError(w, r, err)
		return
	}
	h.log.InfoContext(r.Context(), "instance deleted gracefully by operator", "instance", id, "group", v.Group(), "role", roleFrom(r).String())
	if v, err = h.svc.Instance(id); err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, forRole(instanceJSON(v, true), roleFrom(r)))
}
