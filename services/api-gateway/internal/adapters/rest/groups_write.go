package rest

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/go-chi/chi/v5"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// ifMatch parses If-Match: a quoted revision, or "*" (any), or absent.
func ifMatch(r *http.Request) (rev uint64, any, present bool, err error) {
	h := strings.TrimSpace(r.Header.Get("If-Match"))
	if h == "" {
		return 0, false, false, nil
	}
	if h == "*" {
		return 0, true, true, nil
	}
	n, perr := strconv.ParseUint(strings.Trim(h, `"`), 10, 64)
	if perr != nil || n == 0 || !strings.HasPrefix(h, `"`) || !strings.HasSuffix(h, `"`) {
		return 0, false, true, newError(http.StatusBadRequest, contract.CodeInvalidArgument, `If-Match must be an ETag of this API ("<revision>") or *`).with("header", "If-Match")
	}
	return n, false, true, nil
}

// preconditionFailed turns a revision conflict into 412 on conditional
// writes (lifecycle may call it FailedPrecondition or Aborted).
func preconditionFailed(err error) error {
	switch domain.CodeOf(err) {
	case contract.CodeFailedPrecondition, contract.CodeAborted:
		return newError(http.StatusPreconditionFailed, domain.CodeOf(err), domain.MessageOf(err))
	}
	return err
}

// putGroup creates or replaces a group. Without If-Match it only creates;
// If-Match "<rev>" replaces that revision; If-Match * creates or replaces.
func (h *handler) putGroup(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	rev, anyRev, _, err := ifMatch(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var spec GroupSpec
	if err := decodeSpec(w, r, &spec); err != nil {
		h.writeError(w, r, err)
		return
	}
	cur, _ := h.svc.ReadModel().Group(id)
	rec, err := groupRecord(&spec, id, cur.Record)
	if err == nil {
		err = h.checkGroupRefs(rec)
	}
	if err == nil {
		err = h.sealGroup(rec)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	view, created, err := h.svc.PutGroup(r.Context(), rec, rev, anyRev)
	if err != nil {
		h.writeError(w, r, preconditionFailed(err))
		return
	}
	h.log.InfoContext(r.Context(), "node group written by operator", "group", id, "created", created, "role", roleFrom(r).String())
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/api/v1/nodegroups/"+id)
	}
	w.Header().Set("ETag", etag(view.Revision))
	writeJSON(w, status, h.group(view, h.svc.GroupCounts(id)))
}

// patchGroup applies a JSON merge patch (RFC 7386) to a group, at the
// If-Match revision if given, else at the revision it read.
func (h *handler) patchGroup(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	rev, _, _, err := ifMatch(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	body, err := readMergePatch(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	cur, err := h.svc.Group(id)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if rev == 0 {
		rev = cur.Revision
	}
	spec, err := applyPatch(w, specOf(cur.Record), body)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	rec, err := groupRecord(spec, id, cur.Record)
	if err == nil {
		err = h.checkGroupRefs(rec)
	}
	if err == nil {
		err = h.sealGroup(rec)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	rec.Source = "api"
	view, _, err := h.svc.PutGroup(r.Context(), rec, rev, false)
	if err != nil {
		h.writeError(w, r, preconditionFailed(err))
		return
	}
	h.log.InfoContext(r.Context(), "node group patched by operator", "group", id, "role", roleFrom(r).String())
	w.Header().Set("ETag", etag(view.Revision))
	writeJSON(w, http.StatusOK, h.group(view, h.svc.GroupCounts(id)))
}

// deleteGroup deletes a group at the If-Match revision if given, else at
// the revision this gateway sees.
func (h *handler) deleteGroup(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	rev, _, _, err := ifMatch(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if err := h.svc.DeleteGroup(r.Context(), id, rev); err != nil {
		h.writeError(w, r, preconditionFailed(err))
		return
	}
	h.log.InfoContext(r.Context(), "node group deleted by operator", "group", id, "role", roleFrom(r).String())
	w.WriteHeader(http.StatusNoContent)
}
