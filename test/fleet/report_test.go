package fleet

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// report prints the table, and writes it to FLEET_OUT when set.
func (h *harness) report(rows []row) {
	rows = append(rows, h.memoryRow())
	var b strings.Builder
	commit := "unknown"
	if out, err := exec.Command("git", "-C", repoRoot, "log", "-1", "--format=%h %s").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("git", "-C", repoRoot, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(out))) > 0 {
		commit += " (with uncommitted changes)"
	}
	kinds := strings.Join(h.kinds, ", ")
	switch {
	case h.s.hollow:
		fmt.Fprintf(&b, "Fleet benchmark, N=%d synthetic pods on M=%d hollow node agents (make bench-fleet FLEET_HOLLOW=true)\n\n", h.s.pods, h.nodes)
	case h.nodes > 0:
		fmt.Fprintf(&b, "Fleet benchmark, N=%d pods on M=%d nodes through node agents (make bench-fleet)\n\n", h.s.pods, h.nodes)
	default:
		fmt.Fprintf(&b, "Fleet benchmark, N=%d pods, each writing its own report (make bench-fleet)\n\n", h.s.pods)
	}
	if why := h.abortReason(); why != "" {
		fmt.Fprintf(&b, "- **ABORTED**: %s; the steps after that are missing or partial\n", why)
	}
	fmt.Fprintf(&b, "- commit: %s\n", commit)
	fmt.Fprintf(&b, "- run: %s, %s; %d CPUs (GOMAXPROCS %d), %s\n", h.started.UTC().Format(time.RFC3339), fmtDur(time.Since(h.started)), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	fmt.Fprintf(&b, "- load: at start `%s`; at end `%s`\n", h.startUptime, uptime())
	fmt.Fprintf(&b, "- command: `make bench-fleet FLEET_PODS=%d FLEET_CYCLES=%d FLEET_SPEC_SAMPLES=%d FLEET_BREAKERS=%d FLEET_WAIT_CAP=%s FLEET_SETTLE_CAP=%s FLEET_STEADY=%s FLEET_CLUSTER_PODS=%d FLEET_RESTART_BREAKERS=%d FLEET_RESTART_NAMESPACES=%d%s%s`\n",
		h.s.pods, h.s.cycles, h.s.specSamples, h.s.breakers, h.s.waitCap, h.s.settleCap, h.s.steady, h.s.clusterPods, h.s.restartBreakers, h.s.restartNamespaces, nodeKnobs(h.s), scenarios(h.s))
	if h.mgr != nil {
		fmt.Fprintf(&b, "- operator: the manager binary as a separate process, `%s`\n", strings.Join(h.mgr.args, " "))
	}
	st := h.fleet.stats()
	switch {
	case h.s.hollow:
		fmt.Fprintf(&b, "- identities: %d hollow node agents (nodeagent.NewHollow: the agent's book, pacing and writer, in %d node host processes) as %s/%s (config/nodeagent's ClusterRole) with their agent pods' node-name, node-uid, pod-name and pod-uid extras; "+
			"%d Pods bound to the nodes in equal blocks and wired (%s), whose reports are synthetic (hollowpods_test.go); one %s watch per node host process, not per node; the operator as %s/%s (config/rbac); config/flowcontrol and config/policy applied\n",
			h.nodes, len(h.fleet), operatorNamespace, nodeAgentAccount, len(h.pods), breakerconfig.EnvNodeAgent, breakerconfig.ConfigMapName, operatorNamespace, operatorAccount)
	case h.nodes > 0:
		fmt.Fprintf(&b, "- identities: %d node agents (internal/nodeagent, in %d node host processes) as %s/%s (config/nodeagent's ClusterRole) with their agent pods' node-name, node-uid, pod-name and pod-uid extras; "+
			"pods bound to the nodes in equal blocks and wired (%s), each talking to its node's agent over loopback HTTP with its own bound token (TokenRequest, audience %s); the operator as %s/%s (config/rbac); config/flowcontrol and config/policy applied\n",
			h.nodes, len(h.fleet), operatorNamespace, nodeAgentAccount, breakerconfig.EnvNodeAgent, breakerconfig.NodeAgentAudience, operatorNamespace, operatorAccount)
	default:
		fmt.Fprintf(&b, "- identities: pods as service account %s of %s with their pod-bound extras, the operator as %s/%s (config/rbac), config/flowcontrol and config/policy applied\n", appServiceAccount, namespace, operatorNamespace, operatorAccount)
	}
	fmt.Fprintf(&b, "- writes counted from watch events (ADDED/MODIFIED/DELETED) in the namespace: %s\n", kinds)
	if h.nodes > 0 {
		fmt.Fprintf(&b, "- whole run: pods' reports accepted by their agents %d (%d failed); node agents' writes accepted by the API server %d (%d failed), tokens verified %d, TokenReviews %d, requests refused %d\n\n",
			st.Reports, st.ReportFailures, st.AgentWrites, st.AgentWriteFailures, st.TokensVerified, st.TokenReviews, st.Refused)
	} else {
		fmt.Fprintf(&b, "- pods' own API writes (client side, whole run): %d, of which %d failed\n\n", st.APIWrites, st.APIWriteErrors)
	}
	b.WriteString("| scenario | target | measured | meets | notes |\n| --- | --- | --- | --- | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.scenario, r.target, r.measured, r.meets, r.notes)
	}
	fmt.Println()
	fmt.Print(b.String())
	if why := h.abortReason(); why != "" {
		h.t.Errorf("aborted: %s", why)
	}
	if h.s.out != "" {
		if err := os.WriteFile(h.s.out, []byte(b.String()), 0o644); err != nil {
			logf("write %s: %v", h.s.out, err)
		} else {
			logf("table written to %s", h.s.out)
		}
	}
}
