// Command installsecrets (`make secrets`) generates the per-install
// Secrets of nodesmith: the sealing key ring, the REST tokens and the
// services' NATS NKeys. By default it writes them under
// deploy/kustomize/components/secrets/generated (git-ignored), which the
// secrets component turns into Secrets, and refuses to overwrite existing
// files; -print writes Secret YAML to stdout instead (for a secret
// manager). See deploy/kustomize/README.md.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/nodesmith/nodesmith/tools/kube/installsecrets"
)

func main() {
	dir := flag.String("dir", "deploy/kustomize/components/secrets/generated", "directory to write <secret>/<key> files into (must not hold them yet)")
	print := flag.Bool("print", false, "print Secret YAML to stdout instead of writing files")
	namespace := flag.String("namespace", "nodesmith", "namespace of the printed Secrets")
	flag.Parse()
	secrets, err := installsecrets.Generate()
	if err != nil {
		fmt.Fprintln(os.Stderr, "installsecrets:", err)
		os.Exit(1)
	}
	if *print {
		y, err := installsecrets.YAML(*namespace, secrets)
		if err != nil {
			fmt.Fprintln(os.Stderr, "installsecrets:", err)
			os.Exit(1)
		}
		os.Stdout.Write(y)
		return
	}
	paths, err := installsecrets.WriteDir(*dir, secrets)
	if err != nil {
		fmt.Fprintln(os.Stderr, "installsecrets:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %d files under %s (keep them secret; never commit them):\n", len(paths), *dir)
	for _, p := range paths {
		fmt.Println("  " + p)
	}
}
