// Package domain holds the hook runner's vocabulary and pure rules: what a
// hook is, which of its inputs are acceptable, how a run's outcome is
// classified and which failures are worth retrying, and the bounded output
// buffers a run keeps. It imports only the standard library.
package domain

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"
)

// Kind says at which point of an instance's life a hook runs (libs/contract).
type Kind = contract.HookKind

// Hook kinds.
const (
	KindUnspecified  = contract.HookUnspecified
	KindAfterCreated = contract.HookAfterCreated
	KindBeforeDelete = contract.HookBeforeDelete
)

// Hook is one request to run a script on an instance. A run is identified
// by (InstanceID, Kind, Attempt); a redelivered request runs it again, so
// scripts must be idempotent.
type Hook struct {
	InstanceID string
	Attempt    uint32
	Kind       Kind
	// Name is the hook's name in the group's configuration (for logs).
	Name  string
	Group string
	// Host is the VM's address. An empty host is a failed run that is
	// never retried: there is nothing to connect to.
	Host string
	// Port zero means the runner's default.
	Port int
	// Script is a sh (or bash, by shebang) script. A blank script is a
	// skipped hook.
	Script string
	// Env is exported to the script.
	Env map[string]string
	// RedactedEnv names the entries of Env set by the operator (they may
	// be secrets): their values are redacted from the output the runner
	// logs and returns (see Secrets).
	RedactedEnv []string
	// Timeout bounds the whole run (connecting included); zero means the
	// runner's default.
	Timeout time.Duration
	// PinnedHostKey is the host key (authorized_keys format) recorded at
	// first contact; when set, the VM must present exactly this key.
	PinnedHostKey string
}

// RunID identifies the run: "<instance>.<kind>.<attempt>".
func (h Hook) RunID() string {
	return fmt.Sprintf("%s.%s.%d", h.InstanceID, h.Kind, h.Attempt)
}

// Secrets returns what to redact from the hook's output: the values of
// RedactedEnv, filtered and ordered by Secrets.
func (h Hook) Secrets() []string {
	values := make([]string, 0, len(h.RedactedEnv))
	for _, name := range h.RedactedEnv {
		if v, ok := h.Env[name]; ok {
			values = append(values, v)
		}
	}
	return Secrets(values)
}

// Blank reports whether the hook has nothing to run.
func (h Hook) Blank() bool { return strings.TrimSpace(h.Script) == "" }

// Command is what an executor needs to run the hook.
func (h Hook) Command() Command {
	return Command{Host: h.Host, Port: h.Port, Script: h.Script, Env: h.Env, PinnedHostKey: h.PinnedHostKey}
}

// ErrEmptyHost is returned by Validate for a hook without an address.
var ErrEmptyHost = errors.New("hook has no host to connect to")

// envName is what POSIX shells accept as a variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// maxEnvName bounds a variable name; real names are short and a huge one is
// a bug upstream.
const maxEnvName = 256

// Validate reports why h can never run as given (retrying cannot help).
func (h Hook) Validate() error {
	if strings.TrimSpace(h.Host) == "" {
		return ErrEmptyHost
	}
	if strings.ContainsAny(h.Host, " \t\r\n/@") {
		return fmt.Errorf("invalid host %q", h.Host)
	}
	if h.Port < 0 || h.Port > 65535 {
		return fmt.Errorf("invalid port %d", h.Port)
	}
	if h.Timeout < 0 {
		return fmt.Errorf("negative timeout %s", h.Timeout)
	}
	return ValidateEnv(h.Env)
}

// ValidateEnv checks that every name is a shell identifier and no value
// contains a NUL byte (which no shell variable can hold).
func ValidateEnv(env map[string]string) error {
	for name, value := range env {
		if len(name) > maxEnvName || !envName.MatchString(name) {
			return fmt.Errorf("invalid environment variable name %q", truncate(name, 64))
		}
		if strings.ContainsRune(value, 0) {
			return fmt.Errorf("environment variable %s contains a NUL byte", name)
		}
	}
	return nil
}

// Command is a script to run on a host: the executor's input.
type Command struct {
	Host string
	// Port zero means the executor's default.
	Port          int
	Script        string
	Env           map[string]string
	PinnedHostKey string
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
