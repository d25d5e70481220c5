package yamlconfig_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/yamlconfig"
)

// FuzzParse: Parse never panics, and a rejected file is always a
// *yamlconfig.Error naming the file, each problem saying what is wrong and
// where: a field path or a line, unless it is about the whole file. An
// accepted file yields valid groups. `go test` runs the seeds; `go test
// -fuzz=FuzzParse` explores.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		valid,
		"",
		"nodeGroups: []\n",
		"nodeGroup: []\n",
		"42\n",
		"- a\n- b\n",
		"accounts: {dev: {region: r}}\ninstanceTemplates: {t: {account: dev}}\nnodeGroups: [{id: w, maxSize: 3, instanceTemplate: t}]\n",
		"nodeGroups:\n  - id: W_bad\n    minSize: 5\n    maxSize: 2\n    instanceTemplate: nope\n",
		"nodeGroups: [{id: w, maxSize: x}]\n",
		"nodeGroups: [{id: w, maxSize: 3, nodeTemplate: {taints: [{key: k, effect: Never}]}}]\n",
		"nodeGroups: [{id: w, maxSize: 3, hooks: {afterCreated: {file: join.sh, script: x}}}]\n",
		"nodeGroups: [{id: w, maxSize: 3, hooks: {beforeDelete: {file: /dev/zero}}}]\n",
		"instanceTemplates: {t: {account: a, parameters: {Placement: {Zone: z}}, zone: y}}\n",
		"a: &x [*x]\n",
		"---\n---\n",
		"key: \"unterminated\n",
		"nodeGroups: [{id: w, maxSize: 3, autoscalingOptions: {scaleDownUnneededTime: forever}}]\n",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "join.sh"), []byte("kubeadm join\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := yamlconfig.Parse("fuzz.yaml", data, dir)
		if err == nil {
			for _, g := range cfg.Groups {
				if errs := g.Validate(); len(errs) > 0 {
					t.Fatalf("accepted group %s is invalid: %v", g.ID, errs)
				}
			}
			return
		}
		var ce *yamlconfig.Error
		if !errors.As(err, &ce) {
			t.Fatalf("error of type %T: %v", err, err)
		}
		if ce.File != "fuzz.yaml" || len(ce.Problems) == 0 || !strings.Contains(err.Error(), "fuzz.yaml") {
			t.Fatalf("error does not name the file or lists no problem: %v", err)
		}
		for _, p := range ce.Problems {
			if strings.TrimSpace(p.Msg) == "" {
				t.Fatalf("problem without a message: %+v", p)
			}
			if p.Path == "" && p.Line == 0 && !fileLevel(p.Msg) {
				t.Fatalf("problem names neither a field nor a line: %+v", p)
			}
		}
	})
}

// fileLevel reports problems about the file as a whole.
func fileLevel(msg string) bool {
	return strings.Contains(msg, "exactly one YAML document") || strings.HasPrefix(msg, "malformed YAML: ")
}
