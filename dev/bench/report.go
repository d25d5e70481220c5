package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one measured number.
type Result struct {
	Scenario string  `json:"scenario"`
	Size     string  `json:"size"`
	Metric   string  `json:"metric"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	// Target is the goal from issue #9, if the metric has one.
	Target string `json:"target,omitempty"`
	// Met says whether Value meets Target (absent without a target).
	Met  *bool  `json:"met,omitempty"`
	Note string `json:"note,omitempty"`
}

// Machine describes where the numbers were taken.
type Machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model"`
	MemoryGiB int    `json:"memory_gib"`
	Kernel    string `json:"kernel"`
	Go        string `json:"go"`
	Commit    string `json:"commit"`
}

// Report is bench/results.json.
type Report struct {
	Started   time.Time         `json:"started"`
	Seconds   float64           `json:"seconds"`
	Quick     bool              `json:"quick"`
	Scenarios []string          `json:"scenarios"`
	Machine   Machine           `json:"machine"`
	Results   []Result          `json:"results"`
	Failures  map[string]string `json:"failures,omitempty"`
	// Load is the 1-minute load average when each scenario started: the
	// machine is shared, and its noise shows in the tails.
	Load map[string]float64 `json:"load_avg_1m"`
}

// loadAvg reads the 1-minute load average.
func loadAvg() float64 {
	var l float64
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		_, _ = fmt.Sscanf(string(b), "%f", &l)
	}
	return l
}

func (r *Report) add(res Result) { r.Results = append(r.Results, res) }

// at most / at least targets.
func atMost(v, limit float64) *bool  { b := v <= limit; return &b }
func atLeast(v, limit float64) *bool { b := v >= limit; return &b }

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
func sec(d time.Duration) float64 {
	return float64(d.Nanoseconds()) / 1e9
}

func describeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			m.MemoryGiB = (kb + 1<<19) >> 20
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			m.Commit += "+dirty"
		}
	}
	return m
}

// printTable writes the human-readable table.
func (r *Report) printTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tsize\tmetric\tvalue\ttarget\tmet?")
	for _, res := range r.Results {
		met := ""
		if res.Met != nil {
			met = map[bool]string{true: "yes", false: "NO"}[*res.Met]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", res.Scenario, res.Size, res.Metric, formatValue(res.Value, res.Unit), res.Target, met)
	}
	_ = tw.Flush()
	for _, name := range r.Scenarios {
		fmt.Fprintf(w, "load average (1m) when %s started: %.1f on %d CPUs\n", name, r.Load[name], r.Machine.CPUs)
	}
	for name, err := range r.Failures {
		fmt.Fprintf(w, "FAILED %s: %s\n", name, err)
	}
}

func formatValue(v float64, unit string) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f %s", v, unit)
	case v >= 10:
		return fmt.Sprintf("%.1f %s", v, unit)
	default:
		return fmt.Sprintf("%.2f %s", v, unit)
	}
}

// write stores the report atomically (a reader never sees half a file).
func (r *Report) write(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
