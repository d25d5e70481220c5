package natsconn

import (
	"os"
	"strings"
)

// readSecret reads a mounted secret on every call so a rotated Secret is used
// at the next reconnect. A read error yields "", which the server rejects
// with an auth error that is logged.
func readSecret(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
