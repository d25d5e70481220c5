// Command nodesmithctl is the operator's command line for nodesmith: read
// and edit node groups, templates, accounts and hooks over the gateway's
// REST API, scale, retry, delete and watch. See docs/cli.md.
package main

import (
	"os"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
