package cvmemu

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
)

// Admin is the emulator's test-control API over HTTP, for tools that run
// it in another process (make run, chaos, the node agent's tests). It is a
// development tool without authentication: serve it on loopback only.
//
//	GET    /stockouts                                  the stock-out rules
//	POST   /stockouts  {"zone","instanceType","code","chargeType","atLaunch"}
//	                                                   mark a zone+type sold out (SetSoldOut)
//	DELETE /stockouts?zone=Z&instanceType=T            clear that rule (404 if none)
//	POST   /reclaim    {"instanceId":"ins-…","inSeconds":120}
//	                                                   reclaim a spot VM (ScheduleReclaim);
//	                                                   answers {"terminationTime": RFC 3339}
//
// Errors are 4xx with {"error": "..."} naming the field.
func (e *Emulator) Admin() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stockouts", func(w http.ResponseWriter, _ *http.Request) {
		writeAdmin(w, http.StatusOK, map[string]any{"stockOuts": e.StockOuts()})
	})
	mux.HandleFunc("POST /stockouts", func(w http.ResponseWriter, r *http.Request) {
		var so StockOut
		if err := decodeAdmin(r, &so); err != nil {
			adminError(w, http.StatusBadRequest, err.Error())
			return
		}
		if so.Zone == "" && so.InstanceType == "" {
			adminError(w, http.StatusBadRequest, "zone or instanceType is required (a rule for everything is SetStockOuts' job)")
			return
		}
		e.SetSoldOut(so)
		writeAdmin(w, http.StatusOK, map[string]any{"stockOuts": e.StockOuts()})
	})
	mux.HandleFunc("DELETE /stockouts", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if !e.ClearSoldOut(q.Get("zone"), q.Get("instanceType")) {
			adminError(w, http.StatusNotFound, "no stock-out rule for zone "+q.Get("zone")+" and instanceType "+q.Get("instanceType"))
			return
		}
		writeAdmin(w, http.StatusOK, map[string]any{"stockOuts": e.StockOuts()})
	})
	mux.HandleFunc("POST /reclaim", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			InstanceID string `json:"instanceId"`
			InSeconds  *int   `json:"inSeconds"`
		}
		if err := decodeAdmin(r, &req); err != nil {
			adminError(w, http.StatusBadRequest, err.Error())
			return
		}
		switch {
		case req.InstanceID == "":
			adminError(w, http.StatusBadRequest, "instanceId is required")
			return
		case req.InSeconds == nil || *req.InSeconds < 0 || *req.InSeconds > 24*3600:
			adminError(w, http.StatusBadRequest, "inSeconds is required, in [0, 86400]")
			return
		}
		at, err := e.ScheduleReclaim(req.InstanceID, time.Duration(*req.InSeconds)*time.Second)
		if err != nil {
			status := http.StatusConflict
			if strings.HasSuffix(err.Error(), "not found") {
				status = http.StatusNotFound
			}
			adminError(w, status, err.Error())
			return
		}
		writeAdmin(w, http.StatusOK, map[string]any{"instanceId": req.InstanceID, "terminationTime": at.UTC().Format(time.RFC3339)})
	})
	return mux
}

// decodeAdmin decodes a JSON body strictly (unknown fields are errors).
func decodeAdmin(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err != nil {
		return errors.New("cannot read the body: " + err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errors.New("the body is not valid JSON for this call: " + err.Error())
	}
	return nil
}

func adminError(w http.ResponseWriter, status int, msg string) {
	writeAdmin(w, status, map[string]string{"error": msg})
}

func writeAdmin(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// ServeMetadata serves the VMs' metadata endpoint (Metadata) on a further
// listener at addr and returns its base URL ("http://host:port"); a VM's
// metadata URL is that plus "/<instance-id>". Close stops it too.
func (s *Server) ServeMetadata(addr string) (string, error) {
	return s.serveExtra(addr, "metadata", s.Metadata())
}

// ServeAdmin serves the test-control API (Admin) on a further listener at
// addr (loopback only: it has no authentication) and returns its base URL.
func (s *Server) ServeAdmin(addr string) (string, error) {
	return s.serveExtra(addr, "admin", s.Admin())
}

func (s *Server) serveExtra(addr, what string, h http.Handler) (string, error) {
	x, err := serve(s.Emulator, addr, h)
	if err != nil {
		return "", err
	}
	s.extraMu.Lock()
	s.extra = append(s.extra, x)
	s.extraMu.Unlock()
	url := "http://" + x.Endpoint()
	s.log.Info(what+" endpoint listening", "url", url)
	return url, nil
}
