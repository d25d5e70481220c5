package rest

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3 document of this API. A test keeps its paths
// and methods equal to the routes NewHandler registers.
//
//go:embed openapi.json
var OpenAPI []byte

func (h *handler) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(OpenAPI)
}
