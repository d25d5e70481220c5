package ssh

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
)

// watched holds a value loaded from files and reloads it when any file
// changes (size or modification time), so rotated Secrets and ConfigMaps are
// picked up at the next connection without a restart. A failed reload keeps
// the last good value: a half-written file must not stop every hook.
type watched[T any] struct {
	what  string
	paths []string
	load  func() (T, error)
	log   *slog.Logger

	mu    sync.Mutex
	stamp string
	val   T
}

func newWatched[T any](what string, paths []string, log *slog.Logger, load func() (T, error)) (*watched[T], error) {
	w := &watched[T]{what: what, paths: paths, load: load, log: log}
	stamp, err := w.stampNow()
	if err != nil {
		return nil, err
	}
	val, err := load()
	if err != nil {
		return nil, err
	}
	w.stamp, w.val = stamp, val
	return w, nil
}

func (w *watched[T]) get() T {
	w.mu.Lock()
	defer w.mu.Unlock()
	stamp, err := w.stampNow()
	if err != nil || stamp == w.stamp {
		if err != nil {
			w.log.Error("cannot stat "+w.what+", keeping the loaded version", "err", err)
		}
		return w.val
	}
	val, err := w.load()
	if err != nil {
		w.log.Error("cannot reload "+w.what+", keeping the loaded version", "err", err)
		return w.val
	}
	w.log.Info("reloaded " + w.what)
	w.stamp, w.val = stamp, val
	return w.val
}

func (w *watched[T]) stampNow() (string, error) {
	var b strings.Builder
	for _, p := range w.paths {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("%s: %w", w.what, err)
		}
		fmt.Fprintf(&b, "%s:%d:%d;", p, fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String(), nil
}
