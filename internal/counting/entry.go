package counting

import (
	"math"
	"math/bits"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// Entry is what one carrier says of one breaker, as the operator counts it: a node's
// NodeBreakerEntry for some of that node's pods (FromNode), or a pod's own BreakerReport
// entry, read as the entry of a node holding that one pod (FromPod). Its times are the
// operator's attested ones and its counts are consistent (each within its bound, and the
// parts at most the whole) whatever the report said.
type Entry struct {
	// Breaker is the breaker's name.
	Breaker string
	// Node is the node whose agent carried the entry; "" for a pod's own report.
	Node string
	// Pod is the pod of a pod's own report; "" for a node's entry.
	Pod string
	// Revision is the pods' revision, as the operator's pod cache says for a pod's own
	// report, and as the node's agent says, bounded by that cache, for a node's.
	Revision string

	// Pods is how many pods the entry speaks for; Closed, Open and HalfOpen count them by
	// state (together at most Pods).
	Pods, Closed, Open, HalfOpen int64
	// EarnedOpen of the open pods hold an Open they earned, the earliest reached at
	// OpenSince; EarnedClosed of the closed pods closed on their probes, the latest at
	// ClosedSince. HoldingVerdict of the pods hold a fleet verdict they adopted.
	EarnedOpen, EarnedClosed, HoldingVerdict int64
	OpenSince, ClosedSince                   time.Time
	// ConsecutiveOpens and OpenTimeout are the longest open period of the pods (0: none
	// said).
	ConsecutiveOpens int32
	OpenTimeout      time.Duration

	// ConfigGeneration is the newest configuration generation of the pods, OnLatestConfig
	// how many of them run it and refuse nothing; ConfigErrors refuse the configuration,
	// ConfigError quotes one (as the pod wrote it).
	ConfigGeneration             int64
	OnLatestConfig, ConfigErrors int64
	ConfigError                  string
	// Calls and Failures add up the pods' windows at their last transition; FailureRate
	// is the pod's own rate for a pod's report, the sums' for a node's (nil: no calls).
	Calls, Failures int64
	FailureRate     *int32
	// Traffic adds up the pods' traffic windows (§5.15, §5.16).
	Traffic Window
	// InFlight is the pods' concurrency: their in-flight peaks and refusals added up, and
	// a typical pod's baseline latency (§12).
	InFlight InFlight
	// Keys adds up the pods' breaker Groups; nil when they run a plain breaker.
	Keys *Keys
	// Candidate adds up the pods' judgements of spec.candidate; nil for none.
	Candidate *Candidate
	// Notable are the pods the entry names, the most relevant first.
	Notable []Member
}

// Window is a traffic window: the calls asked, those that succeeded, the retries and the
// throttled among them.
type Window struct {
	Requests, Accepts, Retries, Throttled int64
}

// Keys adds up breaker Groups: their per-key breakers by state, the most one pod holds,
// and the keys not closed in the most pods.
type Keys struct {
	Keys, Open, HalfOpen int64
	Most                 int64
	Worst                []string
}

// Candidate adds up candidate judgements (docs/design.md §11).
type Candidate struct {
	Pods, Open, HalfOpen                       int64
	Opens, WouldRefuse, EnforcedOpens, Refused int64
	// TimeOpen, EnforcedTimeOpen and StartTime are the carrier's median pod's.
	TimeOpen, EnforcedTimeOpen time.Duration
	StartTime                  time.Time
}

// Member is one pod an entry names, with its circuit as it reported it.
type Member struct {
	Pod, Node string
	UID       types.UID
	Circuit   resiliencev1alpha1.PodCircuit
	Reason    string
	Keys      *resiliencev1alpha1.KeySummary
	// Since is the circuit's since as the operator attests it.
	Since time.Time
}

// Earned reports whether the member's state is one it reached on its own evidence.
func (m *Member) Earned() bool {
	return breakerconfig.Earned(string(m.Circuit.State), m.Reason)
}

// source names the carrier of e, for messages: its pod, or its node.
func (e *Entry) source() string {
	if e.Node == "" {
		return Text(e.Pod, MaxNameText)
	}
	return "node " + Text(e.Node, MaxNameText)
}

// count is n as a count within [0, most].
func count(n, most int64) int64 { return min(max(n, 0), most) }

// FromPod reads one entry of a pod's own BreakerReport as the entry of a node holding that
// one pod. since is the entry's since as the operator attests it (Attested), revision the
// pod's, from the operator's pod cache.
func FromPod(pod string, e *resiliencev1alpha1.BreakerReportEntry, since time.Time, revision string) Entry {
	out := Entry{Breaker: e.Name, Pod: pod, Revision: revision, Pods: 1}
	earned := breakerconfig.Earned(string(e.State), e.Reason)
	switch e.State {
	case resiliencev1alpha1.StateOpen:
		out.Open = 1
		if earned {
			out.EarnedOpen, out.OpenSince = 1, since
		}
	case resiliencev1alpha1.StateHalfOpen:
		out.HalfOpen = 1
	default:
		out.Closed = 1
		if earned {
			out.EarnedClosed, out.ClosedSince = 1, since
		}
	}
	if e.Reason == breakerconfig.ReasonAdopted {
		out.HoldingVerdict = 1
	}
	out.ConsecutiveOpens = max(e.ConsecutiveOpens, 0)
	if e.OpenTimeout != nil {
		out.OpenTimeout = max(e.OpenTimeout.Duration, 0)
	}
	out.ConfigGeneration = max(e.ConfigGeneration, 0)
	if e.ConfigError != "" {
		out.ConfigErrors, out.ConfigError = 1, e.ConfigError
	} else {
		out.OnLatestConfig = 1
	}
	if e.Calls != nil {
		out.Calls = count(*e.Calls, breakerconfig.MaxTrafficCount)
		if r := e.FailureRatePercent; r != nil {
			out.Failures = out.Calls * int64(min(max(*r, 0), 100)) / 100
		}
	}
	if r := e.FailureRatePercent; r != nil {
		rate := min(max(*r, 0), 100)
		out.FailureRate = &rate
	}
	out.Traffic = windowOf(e)
	out.InFlight = inFlightOf(e)
	if k := e.Keys; k != nil {
		c := groupCounts(k)
		out.Keys = &Keys{Keys: int64(c.Keys), Open: int64(c.Open), HalfOpen: int64(c.HalfOpen), Most: int64(c.Keys), Worst: worstKeys(k.Worst, nil)}
	}
	if c := e.Candidate; c != nil {
		out.Candidate = judgementOf(c)
	}
	circuit := *e.PodCircuit.DeepCopy()
	out.Notable = []Member{{Pod: pod, Circuit: circuit, Reason: e.Reason, Keys: memberKeys(e.Keys), Since: since}}
	return out
}

// windowOf is the traffic an entry reports, consistent whatever the report says: each
// count within [0, MaxTrafficCount] (the schema's bound, again for a report stored before
// it), a count left out is 0, and accepts, retries and throttled, which are among the
// requests, at most the requests (the schema's rule too, for the same reports).
func windowOf(e *resiliencev1alpha1.BreakerReportEntry) Window {
	return window(e.Requests, e.Accepts, e.Retries, e.Throttled)
}

// window is a Window of the counts given, bounded as windowOf says.
func window(requests, accepts, retries, throttled *int64) Window {
	c := func(n *int64) int64 {
		if n == nil {
			return 0
		}
		return count(*n, breakerconfig.MaxTrafficCount)
	}
	w := Window{Requests: c(requests)}
	w.Accepts, w.Retries, w.Throttled = min(c(accepts), w.Requests), min(c(retries), w.Requests), min(c(throttled), w.Requests)
	return w
}

// judgementOf is one pod's report of its candidate as a Candidate of one pod: each count
// within [0, MaxCandidateCount], a duration left out or negative counted as 0.
func judgementOf(c *resiliencev1alpha1.CandidateReport) *Candidate {
	n := func(v int64) int64 { return count(v, resiliencev1alpha1.MaxCandidateCount) }
	j := &Candidate{Pods: 1, Opens: n(c.Opens), WouldRefuse: n(c.WouldRefuse), TimeOpen: span(c.TimeOpen)}
	switch c.State {
	case resiliencev1alpha1.StateOpen:
		j.Open = 1
	case resiliencev1alpha1.StateHalfOpen:
		j.HalfOpen = 1
	}
	if b := c.Enforced; b != nil {
		j.EnforcedOpens, j.Refused, j.EnforcedTimeOpen = n(b.Opens), n(b.Refused), span(b.TimeOpen)
	}
	if c.StartTime != nil {
		j.StartTime = c.StartTime.Time
	}
	return j
}

func span(d *metav1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return max(d.Duration, 0)
}

// Seen is when the operator first saw what a node entry says: its openSince, its
// closedSince and each of its notable pods (by index), the times they count as at most
// (plus the skew, Attested). A zero time bounds nothing.
type Seen struct {
	OpenSince, ClosedSince time.Time
	Notable                []time.Time
}

// FromNode reads a node's entry, bounded by what the operator's own pod cache says of the
// node: running is how many running pods of the entry's namespace and revision the cache
// has bound to the node (and wired to its agent), and bound says whether the cache has a
// pod of that name and UID bound there. The entry counts for at most running pods, its
// other counts scaled down with it; a notable pod not bound there is dropped. capped says
// whether either happened.
func FromNode(node string, e *resiliencev1alpha1.NodeBreakerEntry, seen Seen, running int64, bound func(name string, uid types.UID) bool) (out Entry, capped bool) {
	pods := count(int64(e.Pods), resiliencev1alpha1.MaxNodePods)
	out = Entry{Breaker: e.Name, Node: node, Revision: e.Revision, Pods: min(pods, max(running, 0))}
	capped = out.Pods < pods
	// Each count scaled by the share of the entry's pods that count, rounded down, and at
	// most its whole: a node that claims more pods than it has speaks for its own.
	scale := func(n, most int64) int64 {
		n = count(n, most)
		if pods == 0 || out.Pods == pods {
			return n
		}
		return mulDiv(n, out.Pods, pods)
	}
	out.Open = scale(int64(e.Open), pods)
	out.HalfOpen = scale(int64(e.HalfOpen), pods-min(pods, count(int64(e.Open), pods)))
	out.Closed = min(scale(int64(e.Closed), pods), out.Pods-out.Open-out.HalfOpen)
	out.EarnedOpen = min(scale(int64(e.EarnedOpen), pods), out.Open)
	out.EarnedClosed = min(scale(int64(e.EarnedClosed), pods), out.Closed)
	out.HoldingVerdict = scale(int64(e.HoldingVerdict), pods)
	out.OnLatestConfig = scale(int64(e.OnLatestConfig), pods)
	out.ConfigErrors = scale(int64(e.ConfigErrors), pods)
	if out.EarnedOpen > 0 && e.OpenSince != nil {
		out.OpenSince = Attested(e.OpenSince.Time, seen.OpenSince)
	}
	if out.EarnedClosed > 0 && e.ClosedSince != nil {
		out.ClosedSince = Attested(e.ClosedSince.Time, seen.ClosedSince)
	}
	out.ConsecutiveOpens = max(e.ConsecutiveOpens, 0)
	if e.OpenTimeout != nil {
		out.OpenTimeout = max(e.OpenTimeout.Duration, 0)
	}
	out.ConfigGeneration = max(e.ConfigGeneration, 0)
	if out.ConfigErrors > 0 {
		out.ConfigError = e.ConfigError
	}
	const most = resiliencev1alpha1.MaxNodeTrafficSum
	out.Calls = scale(e.Calls, most)
	out.Failures = min(scale(e.Failures, most), out.Calls)
	if out.Calls > 0 {
		rate := int32(mulDiv(out.Failures, 100, out.Calls))
		out.FailureRate = &rate
	}
	out.Traffic.Requests = scale(e.Requests, most)
	out.Traffic.Accepts = min(scale(e.Accepts, most), out.Traffic.Requests)
	out.Traffic.Retries = min(scale(e.Retries, most), out.Traffic.Requests)
	out.Traffic.Throttled = min(scale(e.Throttled, most), out.Traffic.Requests)
	// A node's median pod's baseline is a pod's figure, not a sum: it is not scaled.
	out.InFlight = InFlight{Peak: scale(e.InFlightPeak, resiliencev1alpha1.MaxNodeInFlight), Limited: scale(e.Limited, most), Baseline: apiBaseline(e.Baseline)}
	if k := e.Keys; k != nil {
		// The schema's bound on a node's keys (MaxKeyCount of each of MaxNodePods pods), not
		// its traffic's: an int32 count of 2^31 keys passes the latter.
		const mostKeys = breakerconfig.MaxKeyCount * resiliencev1alpha1.MaxNodePods
		keys := scale(int64(k.Keys), mostKeys)
		out.Keys = &Keys{Keys: keys, Most: count(int64(k.Most), breakerconfig.MaxKeyCount), Worst: worstKeys(k.Worst, nil)}
		out.Keys.Open = min(scale(int64(k.Open), mostKeys), keys)
		out.Keys.HalfOpen = min(scale(int64(k.HalfOpen), mostKeys), keys-out.Keys.Open)
	}
	if c := e.Candidate; c != nil {
		judging := min(scale(int64(c.Pods), pods), out.Pods)
		n := func(v int64) int64 { return scale(v, most) }
		out.Candidate = &Candidate{
			Pods: judging, Opens: n(c.Opens), WouldRefuse: n(c.WouldRefuse), EnforcedOpens: n(c.EnforcedOpens), Refused: n(c.Refused),
			TimeOpen: span(c.TimeOpen), EnforcedTimeOpen: span(c.EnforcedTimeOpen),
		}
		out.Candidate.Open = min(scale(int64(c.Open), pods), judging)
		out.Candidate.HalfOpen = min(scale(int64(c.HalfOpen), pods), judging-out.Candidate.Open)
		if c.StartTime != nil {
			out.Candidate.StartTime = c.StartTime.Time
		}
	}
	for i := range e.Notable {
		p := &e.Notable[i]
		if int64(len(out.Notable)) >= out.Pods || len(out.Notable) == resiliencev1alpha1.MaxNotablePods {
			break
		}
		if !bound(p.Name, p.UID) {
			capped = true
			continue
		}
		circuit := *p.PodCircuit.DeepCopy()
		circuit.ConfigError = ""
		since := p.Since.Time
		if i < len(seen.Notable) {
			since = Attested(since, seen.Notable[i])
		}
		out.Notable = append(out.Notable, Member{Pod: p.Name, Node: node, UID: p.UID, Circuit: circuit, Reason: p.Reason, Since: since})
	}
	return out, capped
}

// mulDiv is n × m / d rounded down, exactly (in 128 bits: a count times a bound can pass
// int64), for n, m ≥ 0 and d > 0; 0 for d ≤ 0, and the int64 maximum when the quotient
// does not fit.
func mulDiv(n, m, d int64) int64 {
	if d <= 0 || n <= 0 || m <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(n), uint64(m))
	if hi >= uint64(d) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(d))
	return int64(min(q, math.MaxInt64))
}
