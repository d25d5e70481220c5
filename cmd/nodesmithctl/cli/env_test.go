package cli

import "testing"

// A token sent over plain http to another machine is warned about.
func TestPlaintextRemote(t *testing.T) {
	for server, want := range map[string]bool{
		"http://127.0.0.1:8080":  false,
		"http://localhost:8080":  false,
		"http://[::1]:8080":      false,
		"https://gw.example:443": false,
		"http://gw.example:8080": true,
		"http://192.0.2.1/api":   true,
	} {
		if got := plaintextRemote(server); got != want {
			t.Errorf("%s: %v, want %v", server, got, want)
		}
	}
}
