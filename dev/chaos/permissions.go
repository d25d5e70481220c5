package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// permissionViolations counts the lines of a service log that report a
// NATS permissions violation: nats.go hands the server's "-ERR
// 'Permissions Violation for Publish/Subscription to ...'" to the async
// ErrorHandler (libs/natsconn logs it as "nats async error"), or returns
// it from a call. Any case: "Permissions Violation", "permissions
// violation". It returns the first such line too.
func permissionViolations(log io.Reader) (n int, first string, err error) {
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		if strings.Contains(strings.ToLower(sc.Text()), "permissions violation") {
			if n == 0 {
				first = sc.Text()
			}
			n++
		}
	}
	return n, first, sc.Err()
}

// checkPermissions scans every replica's log (each restart appends to
// the same file) for NATS permissions violations: each service runs with
// its own NKey identity and allow-lists (libs/natsauth), so a violation
// is a permission missing there, whatever else the run survived. It
// returns the total count and a violation per log that has any.
func (r *run) checkPermissions() (int, []string, error) {
	total := 0
	var violations []string
	for _, s := range r.all() {
		f, err := os.Open(s.logFile)
		if err != nil {
			return 0, nil, err
		}
		n, first, err := permissionViolations(f)
		_ = f.Close()
		if err != nil {
			return 0, nil, fmt.Errorf("reading %s: %w", s.logFile, err)
		}
		if n > 0 {
			total += n
			violations = append(violations, fmt.Sprintf("%s logged %d NATS permissions violation(s), the first: %s", s.name, n, strings.TrimSpace(first)))
		}
	}
	return total, violations, nil
}
