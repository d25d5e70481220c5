package lifecyclev1

import "testing"

func TestOpName(t *testing.T) {
	cases := map[string]*Request{
		"increase_size":        {Op: &Request_IncreaseSize{}},
		"delete_catalog_entry": {Op: &Request_DeleteCatalogEntry{}},
		"unknown":              {},
	}
	for want, req := range cases {
		if got := OpName(req); got != want {
			t.Errorf("OpName(%v) = %q, want %q", req, got, want)
		}
	}
	if got := OpName(nil); got != "unknown" {
		t.Errorf("OpName(nil) = %q", got)
	}
}
