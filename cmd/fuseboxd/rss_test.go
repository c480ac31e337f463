package main

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestRSSWith100Breakers: the daemon's resident memory with 100 published breakers, each
// used, stays within 30 MiB (the sidecar's documented memory request leaves room above).
func TestRSSWith100Breakers(t *testing.T) {
	configs := make(map[string]string, 100)
	for i := range 100 {
		name := fmt.Sprintf("dependency-%d", i)
		configs[name] = strings.Replace(paymentsConfig, `"payments"`, strconv.Quote(name), 1)
	}
	d := startBinary(t, configs)
	for i := range 100 {
		for range 20 {
			code, p := d.post(t, fmt.Sprintf("/v1/breakers/dependency-%d/permits", i), "")
			if code != http.StatusCreated {
				t.Fatalf("acquire: %d %v", code, p)
			}
			d.post(t, "/v1/permits/"+p["permit"].(string), `{"outcome":"success"}`)
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	kib := map[string]int{}
	for line := range strings.Lines(string(status)) {
		if f := strings.Fields(line); len(f) >= 2 && strings.HasPrefix(f[0], "Rss") || strings.HasPrefix(line, "VmRSS:") {
			kib[strings.TrimSuffix(f[0], ":")], _ = strconv.Atoi(f[1])
		}
	}
	rssKiB := kib["VmRSS"]
	t.Logf("fuseboxd RSS with 100 breakers after 2,000 calls: %.1f MiB (anonymous %.1f, file-backed %.1f)",
		float64(rssKiB)/1024, float64(kib["RssAnon"])/1024, float64(kib["RssFile"])/1024)
	if rssKiB == 0 || rssKiB > 30*1024 {
		t.Fatalf("RSS = %d KiB, want (0, 30 MiB]", rssKiB)
	}
}
