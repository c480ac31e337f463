package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkClients measures what a call through each client costs (clients/*/bench.*):
// one call() with an acquire and its release against a live fuseboxd, one client, as p50
// and p99; and each call while the sidecar is hung (SIGSTOPped) and while its socket is
// missing, where the back-off answers without the socket, after a first call that pays
// the timeout or the refusal (first-µs). Each language's script times its own calls;
// this runs it against daemons it starts and reports what it printed:
//
//	go test -run '^$' -bench Clients -benchtime 1x -count 3 ./cmd/fuseboxd
func BenchmarkClients(b *testing.B) {
	base := b.TempDir()
	startBenchDaemon(b, filepath.Join(base, "live"))
	hung := startBenchDaemon(b, filepath.Join(base, "hung"))
	if err := hung.Process.Signal(syscall.SIGSTOP); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = hung.Process.Signal(syscall.SIGCONT) })
	missing := filepath.Join(base, "none.sock")
	args := []string{"--live", filepath.Join(base, "live", "fusebox.sock"), "--hung", filepath.Join(base, "hung", "fusebox.sock"), "--missing", missing}

	languages := []struct {
		name string
		tool func() (string, error)
		cmd  []string
	}{
		{"python", func() (string, error) { return findPython(false) }, []string{"bench.py"}},
		{"node", func() (string, error) { return exec.LookPath("node") }, []string{"bench.mjs"}},
		{"php", func() (string, error) { return exec.LookPath("php") }, []string{"bench.php"}},
	}
	for _, lang := range languages {
		b.Run("client="+lang.name, func(b *testing.B) {
			tool, err := lang.tool()
			if err != nil {
				b.Skip(err)
			}
			var metrics map[string]float64
			for range b.N {
				cmd := exec.Command(tool, append(lang.cmd, args...)...)
				cmd.Dir = filepath.Join("../../clients", lang.name)
				cmd.Stderr = os.Stderr
				out, err := cmd.Output()
				if err != nil {
					b.Fatalf("%s: %v\n%s", lang.name, err, out)
				}
				metrics = parseBench(b, out)
			}
			b.ReportMetric(0, "ns/op")
			for unit, v := range metrics {
				b.ReportMetric(v, unit)
			}
		})
	}
}

// parseBench reads lines "KIND calls=N [first_us=F ]p50_us=X p99_us=Y mean_us=M" into
// metrics named KIND-p50-µs and so on.
func parseBench(b *testing.B, out []byte) map[string]float64 {
	metrics := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		for _, f := range fields[1:] {
			k, v, ok := strings.Cut(f, "=")
			if !ok || k == "calls" {
				continue
			}
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("bad figure %q in %q", f, sc.Text())
			}
			metrics[fields[0]+"-"+strings.ReplaceAll(strings.TrimSuffix(k, "_us"), "_", "-")+"-µs"] = x
		}
	}
	if len(metrics) == 0 {
		b.Fatalf("no figures in %q", out)
	}
	return metrics
}

// startBenchDaemon starts fuseboxd on dir/fusebox.sock with an empty config directory
// and waits for its socket to answer.
func startBenchDaemon(b *testing.B, dir string) *exec.Cmd {
	b.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "config"), 0o755); err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(dir, "fusebox.sock")
	cmd := exec.Command(fuseboxdBin, "serve", "--socket", sock, "--config-dir", filepath.Join(dir, "config"))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for exec.Command(fuseboxdBin, "probe", "--socket", sock).Run() != nil {
		if time.Now().After(deadline) {
			b.Fatal("fuseboxd not ready within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd
}
