// Package config makes every command-line flag also readable from an
// environment variable, so the same binary is configured by flags locally and
// by env (ConfigMaps, Secrets) in a cluster. A flag given on the command line
// wins over its environment variable; both win over the default.
package config

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
)

// EnvPrefix prefixes every environment variable: --nats-url is NODESMITH_NATS_URL.
const EnvPrefix = "NODESMITH_"

// EnvName returns the environment variable for a flag name.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(flagName))
}

// Parse parses args into fs, then fills every flag not given on the command
// line from its environment variable (looked up with lookup, os.LookupEnv when
// nil). An invalid value fails naming the variable.
func Parse(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) error {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	usage := fs.Usage
	fs.Usage = func() {
		if usage != nil {
			usage()
		} else {
			fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
			fs.PrintDefaults()
		}
		fmt.Fprintf(fs.Output(), "\nEvery flag can also be set by an environment variable: --some-flag is %sSOME_FLAG.\n", EnvPrefix)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		name := EnvName(f.Name)
		if v, ok := lookup(name); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("environment variable %s: invalid value %q for --%s: %w", name, v, f.Name, serr)
			}
		}
	})
	return err
}

// UnknownEnv returns, sorted, the names of the NODESMITH_* variables in
// environ (os.Environ's "NAME=value" form) that are the environment
// variable of no flag of fs: a misspelt name, or a setting for another
// service, which would otherwise be ignored without a word.
func UnknownEnv(fs *flag.FlagSet, environ []string) []string {
	known := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { known[EnvName(f.Name)] = true })
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix) && !known[name] && !accepted(fs, name) && !slices.Contains(unknown, name) {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	return unknown
}

// acceptedEnv holds, per flag set, what AcceptEnv declared.
var acceptedEnv sync.Map // *flag.FlagSet -> []string

// AcceptEnv declares NODESMITH_* variables that fs's service reads
// without a flag (secrets given as values, read by the service itself):
// UnknownEnv does not report them. A name ending in "*" stands for every
// variable with that prefix.
func AcceptEnv(fs *flag.FlagSet, names ...string) {
	prev, _ := acceptedEnv.Load(fs)
	old, _ := prev.([]string)
	acceptedEnv.Store(fs, append(slices.Clone(old), names...))
}

func accepted(fs *flag.FlagSet, name string) bool {
	v, _ := acceptedEnv.Load(fs)
	names, _ := v.([]string)
	for _, n := range names {
		if p, ok := strings.CutSuffix(n, "*"); ok && strings.HasPrefix(name, p) || n == name {
			return true
		}
	}
	return false
}
