// Package fleet is the fleet-scale benchmark of the loop of docs/design.md §2
// (`make bench-fleet`): N in-process application pods (500 by default) and the
// operator as it runs in production — the real manager binary, a separate OS
// process — against an envtest API server. It measures how long a fleet-wide
// trip, a recovery, a fleet's start and a spec change take to show, how many
// writes they cost, how big the CircuitBreaker and the node reports grow, the
// operator's heap and the peak resident memory of the API server, the operator and
// the node hosts, and prints one markdown table (also written to $FLEET_OUT when
// set).
//
// With FLEET_NODES=M the pods are bound to M nodes and report and read their
// config through their node's agent (docs/design.md §9), the real
// internal/nodeagent, M of them in node host processes of this test binary
// (nodehost_test.go), each under the identity a real agent pod's token gives it.
// Each node's agent writes what its pods add up to, per breaker and revision
// (NodeBreakerReport's counts), and the operator counts them for at most the Pods
// its cache has bound to the node and wired to the agent: the fleet's Pods carry
// FUSEBOX_NODE_AGENT, as the pod webhook wires them.
//
// With FLEET_HOLLOW=true as well, the nodes run hollow agents (nodeagent.NewHollow,
// hollow_test.go): the real agent's book, pacing and writer under the node's agent
// identity, fed synthetic pod reports instead of pods' requests, so that the API
// server and the operator meet 100,000 pods' worth of node reports on a machine
// that cannot run 100,000 pods. The N Pod objects are still created, bound and
// wired (the operator counts only the pods its cache has). Each synthetic pod
// reports every breaker it uses: Closed/Started at start; Open/Tripped with calls
// and failureRatePercent when the harness trips it; Closed/ProbesSucceeded when it
// recovers; and the fleet's verdict as pkg/breaker's Adopt takes it (Open/Adopted
// with the verdict's since). Config fan-out is not simulated per node: a hollow
// host process watches the namespace's fusebox-breakers ConfigMap once and applies
// each change (a verdict, a new generation) to all of its synthetic pods, and "every
// pod holds the verdict" is when the last host has. Open periods do not end by
// themselves; the harness's recovery closes them.
//
// It is design-agnostic: it talks only to CircuitBreaker objects (spec,
// status.conditions, status.memberCounts, status.state), Pods, ConfigMaps,
// BreakerReports and NodeBreakerReports when the API server serves them, the
// API server's /metrics, and connections through kube.Connect and their breakers
// (hollow: the synthetic pods' states). It never reads status.members.
//
// Every wait is capped. The run stops itself, the API server first, when the
// machine has less than max(2 GiB, 10%) of its memory available: at N=500 on a
// design where every pod writes one object, the envtest API server grew past
// 23 GB (docs/benchmarks.md).
//
// It runs only with FLEET_BENCH=1, so `make test` skips it. Knobs (environment):
//
//	FLEET_PODS          pods (default 500)
//	FLEET_NODES         nodes (default 0: none, every pod writes its own BreakerReport and
//	                    watches its ConfigMap). M > 0 runs M node agents (internal/nodeagent)
//	                    under node-bound identities, with the pods bound to the nodes in
//	                    equal blocks and wired to their node's agent (nodes_test.go); at
//	                    most 20,000 pods with real agents (beyond that, FLEET_HOLLOW)
//	FLEET_HOLLOW        true: the M nodes run hollow agents fed synthetic pod reports
//	                    (hollow_test.go; default false); needs FLEET_NODES
//	FLEET_NODE_HOSTS    node host processes the nodes are spread over (default: one per
//	                    2,000 pods, since a process here may hold at most 20,000 open
//	                    files; hollow, one per 25,000 pods and at most one per CPU,
//	                    hollow_test.go's hollowHosts)
//	FLEET_BREAKERS      CircuitBreakers in the heap scenario (default 10)
//	FLEET_CYCLES        trip/recover cycles (default 5)
//	FLEET_SPEC_SAMPLES  spec changes (default 5)
//	FLEET_WAIT_CAP      cap of every measured wait (default 5m)
//	FLEET_SETTLE_CAP    cap of every wait for quiet between steps (default FLEET_WAIT_CAP)
//	FLEET_STEADY        length of the steady-state window (default 30s)
//	FLEET_CLUSTER_PODS  pods that use no breaker, created last, to weigh the operator's pod cache (default 0: not run)
//	FLEET_RESTART_BREAKERS    CircuitBreakers for the restart scenario (default 0: not run)
//	FLEET_RESTART_NAMESPACES  namespaces they are spread over (default 100)
//	FLEET_SCENARIOS     which scenarios run, comma-separated, in this order (default all):
//	                    start,steady,spec,trip,incident,many,bystanders,restart; start always runs
//	FLEET_MANAGER       manager binary (default: go build ./cmd/manager into a temp dir)
//	FLEET_MANAGER_LOG   file for the manager's log (default: a temp file, removed)
//	FLEET_MANAGER_MEMORY  the manager's memory limit, as a container's (e.g. 512Mi): it
//	                    runs in a memory cgroup of its own with that limit, which it reads
//	                    (cgroup_test.go; needs root; default: no limit)
//	FLEET_OUT           file to write the markdown table to
//	FLEET_PROFILE       directory for 20 s CPU profiles of the API server, the operator and
//	                    each node host from each fleet incident's trip
//	                    (incident-N-apiserver.pprof, incident-N-operator.pprof,
//	                    incident-N-host-H.pprof; go tool pprof reads them), and
//	                    their heap profiles after the start and after the incidents
//	                    (start-apiserver.heap, incidents-operator.heap, ...)
package fleet

import (
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// settings are the benchmark's knobs, read from the environment.
type settings struct {
	pods, breakers, cycles, specSamples int
	clusterPods                         int
	nodes, nodeHosts                    int
	hollow                              bool // the nodes run hollow agents (FLEET_HOLLOW)
	restartBreakers, restartNamespaces  int
	scenarios                           map[string]bool // nil: all
	waitCap, settleCap, steady          time.Duration
	manager, managerLog, out            string
	profile                             string // a directory for the API server's CPU profile of each incident, or ""
	managerMemory                       int64  // bytes: the manager's memory limit, 0 for none
}

func loadSettings() (settings, error) {
	s := settings{
		pods:              500,
		breakers:          10,
		cycles:            5,
		specSamples:       5,
		restartNamespaces: 100,
		waitCap:           5 * time.Minute,
		steady:            30 * time.Second,
		manager:           os.Getenv("FLEET_MANAGER"),
		managerLog:        os.Getenv("FLEET_MANAGER_LOG"),
		out:               os.Getenv("FLEET_OUT"),
		profile:           os.Getenv("FLEET_PROFILE"),
	}
	for _, v := range []struct {
		env string
		dst *int
	}{{"FLEET_PODS", &s.pods}, {"FLEET_BREAKERS", &s.breakers}, {"FLEET_CYCLES", &s.cycles}, {"FLEET_SPEC_SAMPLES", &s.specSamples}, {"FLEET_CLUSTER_PODS", &s.clusterPods}, {"FLEET_RESTART_BREAKERS", &s.restartBreakers}, {"FLEET_RESTART_NAMESPACES", &s.restartNamespaces}, {"FLEET_NODES", &s.nodes}, {"FLEET_NODE_HOSTS", &s.nodeHosts}} {
		if e := os.Getenv(v.env); e != "" {
			n, err := strconv.Atoi(e)
			if err != nil || n < 0 || n == 0 && !zeroMeansOff[v.env] {
				return s, errorf("%s=%q: want a positive integer", v.env, e)
			}
			*v.dst = n
		}
	}
	if e := os.Getenv("FLEET_MANAGER_MEMORY"); e != "" {
		q, err := resource.ParseQuantity(e)
		if err != nil || q.Value() <= 0 {
			return s, errorf("FLEET_MANAGER_MEMORY=%q: want a memory size such as 512Mi", e)
		}
		s.managerMemory = q.Value()
	}
	if e := os.Getenv("FLEET_HOLLOW"); e != "" {
		v, err := strconv.ParseBool(e)
		if err != nil {
			return s, errorf("FLEET_HOLLOW=%q: want true or false", e)
		}
		s.hollow = v
	}
	if s.hollow && s.nodes == 0 {
		return s, errorf("FLEET_HOLLOW without FLEET_NODES: hollow agents are nodes'")
	}
	if s.nodes > 0 && !s.hollow && s.pods > maxRealNodePods {
		return s, errorf("FLEET_PODS=%d with real node agents: at most %d pods run in process here; FLEET_HOLLOW=true runs more", s.pods, maxRealNodePods)
	}
	if s.nodes > s.pods {
		return s, errorf("FLEET_NODES=%d: more nodes than pods (FLEET_PODS=%d)", s.nodes, s.pods)
	}
	if s.nodeHosts > 0 && s.nodes == 0 {
		return s, errorf("FLEET_NODE_HOSTS=%d without FLEET_NODES: node hosts run nodes", s.nodeHosts)
	}
	if e := os.Getenv("FLEET_SCENARIOS"); e != "" {
		s.scenarios = map[string]bool{"start": true}
		for _, name := range strings.Split(e, ",") {
			s.scenarios[strings.TrimSpace(name)] = true
		}
	}
	s.settleCap = s.waitCap
	for _, v := range []struct {
		env string
		dst *time.Duration
	}{{"FLEET_WAIT_CAP", &s.waitCap}, {"FLEET_SETTLE_CAP", &s.settleCap}, {"FLEET_STEADY", &s.steady}} {
		if e := os.Getenv(v.env); e != "" {
			d, err := time.ParseDuration(e)
			if err != nil || d <= 0 {
				return s, errorf("%s=%q: want a positive duration such as 3m", v.env, e)
			}
			*v.dst = d
			if v.env == "FLEET_WAIT_CAP" && os.Getenv("FLEET_SETTLE_CAP") == "" {
				s.settleCap = d
			}
		}
	}
	return s, nil
}

// maxRealNodePods is the most pods the real-agent node mode runs: each is a real
// pkg/breaker/kube agent with two loopback connections, in this machine's processes.
const maxRealNodePods = 20000

// zeroMeansOff are the knobs whose 0 turns something off rather than being refused.
var zeroMeansOff = map[string]bool{"FLEET_CLUSTER_PODS": true, "FLEET_RESTART_BREAKERS": true, "FLEET_NODES": true, "FLEET_NODE_HOSTS": true}

// nodeKnobs is the node mode's part of the command, or "".
func nodeKnobs(s settings) string {
	if s.nodes == 0 {
		return ""
	}
	out := " FLEET_NODES=" + strconv.Itoa(s.nodes)
	if s.hollow {
		out += " FLEET_HOLLOW=true"
	}
	if s.nodeHosts > 0 {
		out += " FLEET_NODE_HOSTS=" + strconv.Itoa(s.nodeHosts)
	}
	return out
}

// runs reports whether scenario is to run.
func (s settings) runs(scenario string) bool { return s.scenarios == nil || s.scenarios[scenario] }

func scenarios(s settings) string {
	if s.scenarios == nil {
		return ""
	}
	names := slices.Sorted(maps.Keys(s.scenarios))
	return " FLEET_SCENARIOS=" + strings.Join(names, ",")
}
