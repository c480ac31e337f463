package counting

import (
	"cmp"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
	"github.com/fusebox-dev/fusebox/pkg/breaker/breakerconfig"
)

// PodLine is what one pod of a node last told its node's agent: its entries, which passed
// breakerconfig.ParseAgentReport, and its revision as the agent's pod cache says.
type PodLine struct {
	Name     string
	UID      types.UID
	Revision string
	Entries  []breakerconfig.ReportEntry
}

// nodeFloor is the fewest calls, requests and candidate counts per pod a node's pod counts
// for before it is bounded: the default minimumThroughput, which the agent judges by for
// want of the spec (the operator bounds the node's sums again by the spec's).
const nodeFloor = int64(resiliencev1alpha1.DefaultMinimumThroughput)

// Node adds up a node's pod lines in one namespace into the entries of its
// NodeBreakerReport, one per breaker and revision, in name and revision order. Within the
// node the pods count as the operator counts them across nodes (§5.17): each pod's calls,
// traffic, keys and candidate counts at most maxShareOfMedian times the node's upper median
// pod's (or a floor, if more) before they are summed, so that a node's sums are its typical
// pods' and not one pod's.
func Node(lines []PodLine) []resiliencev1alpha1.NodeBreakerEntry {
	type key struct{ name, revision string }
	type pod struct {
		line  *PodLine
		entry *breakerconfig.ReportEntry
	}
	groups := map[key][]pod{}
	for i := range lines {
		l := &lines[i]
		for k := range l.Entries {
			e := &l.Entries[k]
			id := key{e.Name, l.Revision}
			groups[id] = append(groups[id], pod{l, e})
		}
	}
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.revision, b.revision)) })
	out := make([]resiliencev1alpha1.NodeBreakerEntry, 0, len(keys))
	for _, k := range keys {
		pods := groups[k]
		// In pod-name order, so that equal nodes make equal entries.
		slices.SortFunc(pods, func(a, b pod) int {
			return cmp.Or(cmp.Compare(a.line.Name, b.line.Name), cmp.Compare(a.line.UID, b.line.UID))
		})
		entries := make([]*breakerconfig.ReportEntry, len(pods))
		cands := make([]notableCandidate, len(pods))
		for i, p := range pods {
			entries[i] = p.entry
			cands[i] = notableCandidate{name: p.line.Name, uid: p.line.UID, entry: p.entry}
		}
		e := sumPods(k.name, k.revision, entries)
		e.Notable = notable(cands, e.ConfigGeneration)
		out = append(out, e)
	}
	return out
}

// notableCandidate is a pod that may be named in its node's entry.
type notableCandidate struct {
	name  string
	uid   types.UID
	entry *breakerconfig.ReportEntry
}

// sumPods is the entry of the pods' reports of one breaker at one revision, without its
// notable pods.
func sumPods(name, revision string, pods []*breakerconfig.ReportEntry) resiliencev1alpha1.NodeBreakerEntry {
	e := resiliencev1alpha1.NodeBreakerEntry{Name: name, Revision: revision, Pods: int32(min(len(pods), resiliencev1alpha1.MaxNodePods))}
	if len(pods) > resiliencev1alpha1.MaxNodePods {
		pods = pods[:resiliencev1alpha1.MaxNodePods]
	}
	var openSince, closedSince time.Time
	var longest time.Duration
	for _, p := range pods {
		e.ConfigGeneration = max(e.ConfigGeneration, p.ConfigGeneration)
	}
	for _, p := range pods {
		earned := breakerconfig.Earned(p.State, p.Reason)
		switch p.State {
		case breakerconfig.StateOpen:
			e.Open++
			if earned {
				e.EarnedOpen++
				if openSince.IsZero() || p.Since.Before(openSince) {
					openSince = p.Since.Time
				}
				// The count a fleet verdict backs off by is an earned Open's, as a pod's own
				// report gives it: a pod holding an earlier verdict starts no period.
				e.ConsecutiveOpens = max(e.ConsecutiveOpens, p.ConsecutiveOpens)
			}
		case breakerconfig.StateHalfOpen:
			e.HalfOpen++
		default:
			e.Closed++
			if earned {
				e.EarnedClosed++
				if p.Since.After(closedSince) {
					closedSince = p.Since.Time
				}
			}
		}
		if p.Reason == breakerconfig.ReasonAdopted {
			e.HoldingVerdict++
		}
		if p.OpenTimeout != nil {
			longest = max(longest, time.Duration(*p.OpenTimeout))
		}
		switch {
		case p.ConfigError != "":
			if e.ConfigErrors == 0 {
				e.ConfigError = Text(p.ConfigError, resiliencev1alpha1.MaxConfigErrorSample)
			}
			e.ConfigErrors++
		case p.ConfigGeneration == e.ConfigGeneration:
			e.OnLatestConfig++
		}
	}
	if !openSince.IsZero() {
		e.OpenSince = &metav1.MicroTime{Time: openSince.UTC()}
	}
	if !closedSince.IsZero() {
		e.ClosedSince = &metav1.MicroTime{Time: closedSince.UTC()}
	}
	if longest > 0 {
		e.OpenTimeout = &metav1.Duration{Duration: longest}
	}
	sumCalls(&e, pods)
	sumTraffic(&e, pods)
	sumInFlight(&e, pods)
	e.Keys = sumKeys(pods)
	e.Candidate = sumCandidates(pods, e.ConfigGeneration)
	return e
}

// podBound is maxShareOfMedian times the upper median of values, or of floor if more: the
// most one pod's figure counts for in a node's sum.
func podBound(values []int64, floor int64) int64 {
	ws := make([]weighted[int64], len(values))
	for i, v := range values {
		ws[i] = weighted[int64]{v, 1}
	}
	return maxShareOfMedian * max(upperMedian(ws, compareInt64), floor)
}

func sumCalls(e *resiliencev1alpha1.NodeBreakerEntry, pods []*breakerconfig.ReportEntry) {
	calls := make([]int64, len(pods))
	for i, p := range pods {
		if p.Calls != nil {
			calls[i] = count(*p.Calls, breakerconfig.MaxTrafficCount)
		}
	}
	bound := podBound(calls, nodeFloor)
	for i, p := range pods {
		c := min(calls[i], bound)
		var f int64
		if p.FailureRatePercent != nil {
			f = c * int64(min(max(*p.FailureRatePercent, 0), 100)) / 100
		}
		e.Calls += c
		e.Failures += f
	}
}

func sumTraffic(e *resiliencev1alpha1.NodeBreakerEntry, pods []*breakerconfig.ReportEntry) {
	windows := make([]Window, len(pods))
	requests := make([]int64, len(pods))
	for i, p := range pods {
		windows[i] = wireWindow(p)
		requests[i] = windows[i].Requests
	}
	bound := podBound(requests, nodeFloor)
	for _, w := range windows {
		w = w.scaledTo(bound)
		e.Requests += w.Requests
		e.Accepts += w.Accepts
		e.Retries += w.Retries
		e.Throttled += w.Throttled
	}
}

// sumInFlight adds up the pods' in-flight peaks and refusals, each pod's bounded first as
// its calls are, and names the upper median pod's baseline among those that report one
// (the operator's rule across carriers, ConcurrencyOf, within the node).
func sumInFlight(e *resiliencev1alpha1.NodeBreakerEntry, pods []*breakerconfig.ReportEntry) {
	peaks := make([]int64, len(pods))
	limited := make([]int64, len(pods))
	var baselines []weighted[int64]
	for i, p := range pods {
		if p.InFlightPeak != nil {
			peaks[i] = count(*p.InFlightPeak, breakerconfig.MaxInFlight)
		}
		if p.Limited != nil {
			limited[i] = count(*p.Limited, breakerconfig.MaxTrafficCount)
		}
		if p.Baseline != nil && *p.Baseline > 0 {
			baselines = append(baselines, weighted[int64]{count(int64(*p.Baseline), int64(breakerconfig.MaxBaseline)), 1})
		}
	}
	peakBound, limitedBound := podBound(peaks, nodeFloor), podBound(limited, nodeFloor)
	for i := range pods {
		e.InFlightPeak += min(peaks[i], peakBound)
		e.Limited += min(limited[i], limitedBound)
	}
	if len(baselines) > 0 {
		e.Baseline = &metav1.Duration{Duration: time.Duration(upperMedian(baselines, compareInt64))}
	}
}

// wireWindow is windowOf for a pod's wire entry.
func wireWindow(p *breakerconfig.ReportEntry) Window {
	return window(p.Requests, p.Accepts, p.Retries, p.Throttled)
}

// sumKeys adds up the pods' breaker Groups; nil when none reports one.
func sumKeys(pods []*breakerconfig.ReportEntry) *resiliencev1alpha1.NodeKeySummary {
	var held []int64
	for _, p := range pods {
		if p.Keys != nil {
			held = append(held, count(int64(p.Keys.Keys), breakerconfig.MaxKeyCount))
		}
	}
	if len(held) == 0 {
		return nil
	}
	bound := podBound(held, minKeysBound)
	out := &resiliencev1alpha1.NodeKeySummary{}
	inPods := map[string]int{}
	for _, p := range pods {
		k := p.Keys
		if k == nil {
			continue
		}
		c := groupCounts(&resiliencev1alpha1.KeySummary{Keys: k.Keys, Open: k.Open, HalfOpen: k.HalfOpen})
		keys, o, h := int64(c.Keys), int64(c.Open), int64(c.HalfOpen)
		if keys > bound {
			o, h, keys = mulDiv(o, bound, keys), mulDiv(h, bound, keys), bound
		}
		out.Keys += int32(keys)
		out.Open += int32(o)
		out.HalfOpen += int32(h)
		out.Most = max(out.Most, int32(keys))
		var named [breakerconfig.MaxWorstKeys]string
		for _, key := range worstKeys(k.Worst, named[:0]) {
			inPods[key]++
		}
	}
	for key := range inPods {
		out.Worst = append(out.Worst, key)
	}
	slices.SortFunc(out.Worst, func(a, b string) int { return cmp.Or(cmp.Compare(inPods[b], inPods[a]), cmp.Compare(a, b)) })
	out.Worst = out.Worst[:min(len(out.Worst), breakerconfig.MaxWorstKeys)]
	if len(out.Worst) == 0 {
		out.Worst = nil
	}
	return out
}

// sumCandidates adds up the candidate judgements of the pods that run generation and refuse
// nothing; nil when none judges one.
func sumCandidates(pods []*breakerconfig.ReportEntry, generation int64) *resiliencev1alpha1.NodeCandidateSummary {
	var js []*breakerconfig.CandidateEntry
	for _, p := range pods {
		if p.Candidate != nil && p.ConfigError == "" && p.ConfigGeneration == generation {
			js = append(js, p.Candidate)
		}
	}
	if len(js) == 0 {
		return nil
	}
	out := &resiliencev1alpha1.NodeCandidateSummary{Pods: int32(len(js))}
	n := func(v int64) int64 { return count(v, resiliencev1alpha1.MaxCandidateCount) }
	sum := func(of func(*breakerconfig.CandidateEntry) int64, floor int64) int64 {
		values := make([]int64, len(js))
		for i, j := range js {
			values[i] = n(of(j))
		}
		bound := podBound(values, floor)
		var s int64
		for _, v := range values {
			s += min(v, bound)
		}
		return s
	}
	var timeOpen, enforcedTimeOpen []weighted[int64]
	var starts []weighted[time.Time]
	for _, j := range js {
		switch j.State {
		case breakerconfig.StateOpen:
			out.Open++
		case breakerconfig.StateHalfOpen:
			out.HalfOpen++
		}
		timeOpen = append(timeOpen, weighted[int64]{int64(wireSpan(j.TimeOpen)), 1})
		var enforced time.Duration
		if j.Enforced != nil {
			enforced = wireSpan(j.Enforced.TimeOpen)
		}
		enforcedTimeOpen = append(enforcedTimeOpen, weighted[int64]{int64(enforced), 1})
		if j.StartTime != nil {
			starts = append(starts, weighted[time.Time]{j.StartTime.Time, 1})
		}
	}
	out.Opens = sum(func(j *breakerconfig.CandidateEntry) int64 { return j.Opens }, 1)
	out.WouldRefuse = sum(func(j *breakerconfig.CandidateEntry) int64 { return j.WouldRefuse }, nodeFloor)
	out.EnforcedOpens = sum(func(j *breakerconfig.CandidateEntry) int64 {
		if j.Enforced == nil {
			return 0
		}
		return j.Enforced.Opens
	}, 1)
	out.Refused = sum(func(j *breakerconfig.CandidateEntry) int64 {
		if j.Enforced == nil {
			return 0
		}
		return j.Enforced.Refused
	}, nodeFloor)
	out.TimeOpen = &metav1.Duration{Duration: time.Duration(upperMedian(timeOpen, compareInt64))}
	out.EnforcedTimeOpen = &metav1.Duration{Duration: time.Duration(upperMedian(enforcedTimeOpen, compareInt64))}
	if len(starts) > 0 {
		start := metav1.NewTime(upperMedian(starts, func(a, b time.Time) int { return a.Compare(b) }))
		out.StartTime = &start
	}
	return out
}

func wireSpan(d *breakerconfig.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return max(time.Duration(*d), 0)
}

// notable picks at most MaxNotablePods of the pods, the most relevant first: open (the most
// recent first), half-open, refusing the configuration, behind generation; closed pods on
// it are never notable. Ties go by pod name.
func notable(pods []notableCandidate, generation int64) []resiliencev1alpha1.NotablePod {
	var picked []notableCandidate
	for _, p := range pods {
		if Standing(p.entry, generation) < standingClosed {
			picked = append(picked, p)
		}
	}
	slices.SortFunc(picked, func(a, b notableCandidate) int {
		return cmp.Or(cmp.Compare(Standing(a.entry, generation), Standing(b.entry, generation)), b.entry.Since.Compare(a.entry.Since.Time), cmp.Compare(a.name, b.name))
	})
	picked = picked[:min(len(picked), resiliencev1alpha1.MaxNotablePods)]
	if len(picked) == 0 {
		return nil
	}
	out := make([]resiliencev1alpha1.NotablePod, len(picked))
	for i, p := range picked {
		out[i] = resiliencev1alpha1.NotablePod{Name: p.name, UID: p.uid, PodCircuit: PodCircuit(p.entry), Reason: p.entry.Reason}
		out[i].ConfigError = ""
	}
	return out
}

// standingClosed is the Standing of a closed pod on the latest configuration.
const standingClosed = 4

// Standing ranks a pod's entry as status.members and a node's notable pods rank pods, the
// most relevant first: open 0, half-open 1, refusing the configuration 2, behind
// generation 3, closed on it 4.
func Standing(e *breakerconfig.ReportEntry, generation int64) int {
	switch {
	case e.State == breakerconfig.StateOpen:
		return 0
	case e.State == breakerconfig.StateHalfOpen:
		return 1
	case e.ConfigError != "":
		return 2
	case e.ConfigGeneration < generation:
		return 3
	}
	return standingClosed
}

// PodCircuit is what a pod's wire entry says of its circuit, in the API's shape.
func PodCircuit(e *breakerconfig.ReportEntry) resiliencev1alpha1.PodCircuit {
	c := resiliencev1alpha1.PodCircuit{
		State:               resiliencev1alpha1.State(e.State),
		Since:               metav1.NewTime(e.Since.Time),
		Calls:               e.Calls,
		FailureRatePercent:  e.FailureRatePercent,
		SlowCallRatePercent: e.SlowCallRatePercent,
		Trigger:             e.Trigger,
		ConsecutiveOpens:    e.ConsecutiveOpens,
		ConfigGeneration:    e.ConfigGeneration,
		ConfigError:         e.ConfigError,
	}
	if e.OpenTimeout != nil {
		c.OpenTimeout = &metav1.Duration{Duration: time.Duration(*e.OpenTimeout)}
	}
	return c
}
