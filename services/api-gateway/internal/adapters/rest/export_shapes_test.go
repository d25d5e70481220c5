package rest

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"

	"github.com/nodesmith/nodesmith/libs/cloudshapes"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// CheckOfferingShapes runs a template write's offering check, as
// writeCatalog does before storing, on a handler asking ask, and records
// what the client gets: the error body, or 200 with the headers set.
func CheckOfferingShapes(ask cloudshapes.Ask, t *domain.InstanceTemplate) *httptest.ResponseRecorder {
	return checkOfferingShapes(nil, ask, t, "")
}

// CheckOfferingShapesWith is CheckOfferingShapes with svc's catalog (the
// template's account).
func CheckOfferingShapesWith(svc *app.Service, ask cloudshapes.Ask, t *domain.InstanceTemplate) *httptest.ResponseRecorder {
	return checkOfferingShapes(svc, ask, t, "")
}

// CheckGroupOfferingShapes is CheckOfferingShapes of a group write.
func CheckGroupOfferingShapes(ask cloudshapes.Ask, g *domain.NodeGroup) *httptest.ResponseRecorder {
	return checkOfferingShapes(nil, ask, inlineTemplate(g), "instanceTemplate.")
}

func checkOfferingShapes(svc *app.Service, ask cloudshapes.Ask, t *domain.InstanceTemplate, prefix string) *httptest.ResponseRecorder {
	h := &handler{svc: svc, log: slog.New(slog.DiscardHandler), shapes: ask}
	w := httptest.NewRecorder()
	r := httptest.NewRequestWithContext(context.Background(), http.MethodPut, "/api/v1/", nil)
	if err := h.checkOfferingShapes(r.Context(), w, t, prefix); err != nil {
		h.writeError(w, r, err)
		return w
	}
	w.WriteHeader(http.StatusOK)
	return w
}
