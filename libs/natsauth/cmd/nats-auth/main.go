// Command nats-auth writes the production NATS authorization block
// (deploy/kustomize/base/files/nats-authorization.conf, included by
// nats.conf) from libs/natsauth's identities and permissions. Run it
// through `make nats-auth` after changing them; a test fails while the
// committed file differs.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/nodesmith/nodesmith/libs/natsauth"
)

func main() {
	out := flag.String("out", "deploy/kustomize/base/files/nats-authorization.conf", "file to write")
	flag.Parse()
	if err := os.WriteFile(*out, []byte(natsauth.Config()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
