// Package redisstore shares the verdict of circuit breakers between processes through
// Redis, so that one process that sees a dependency fail opens the circuit for all of them.
//
// What is shared is the verdict of a [breaker.Breaker] (its state and when that state was
// reached), never a counter: each process measures its own traffic, and any process that
// finds the failure rate too high opens the shared circuit; each counts its own half-open
// probes, and the first to reach the success threshold closes the shared circuit. The call path never waits for Redis. A [Store] learns of local
// transitions as a [observe.Observer], queues them, and publishes them from its own
// goroutine; verdicts published elsewhere arrive by pub/sub, with a periodic read as a
// safety net, and are applied with [breaker.Breaker.Adopt].
//
// # Consistency
//
// A verdict is stored in a hash under prefix + application + ":" + key (see
// [WithApplication]: two programs on one Redis that both name a breaker "db" do not share
// by accident) with an epoch that grows by one with every shared state change. A process
// publishes by a compare-and-set done in a Lua script: it succeeds only if the process's
// view is current (the epoch it last knew is at least the stored one), and writes epoch+1. Two processes that trip on the same view therefore
// produce one open period: the first write wins and the second gets the winner's verdict
// back and adopts it. A process acting on an outdated view can never overwrite a newer
// verdict.
//
// An open verdict carries its open period (how many consecutive opens, and how long this
// one lasts: docs/design.md §5.13), and every process that adopts it keeps that period, so
// processes back off as one even where their own policies differ. The period is stored
// with the epoch it belongs to, so that one left behind by a write from an older version
// of this package, which does not know the field, is not taken for the current verdict's;
// such a verdict gets each process's own period.
//
// # Failures
//
// When Redis is unreachable, breakers decide alone; the store logs the outage once, counts
// failed round trips ([Store.Stats]), and retries at every poll. When Redis returns, each
// breaker is reconciled by epoch: a newer shared verdict is adopted, local news is published,
// and a store that lost its data is written again from what the processes know. A value
// under a key that this package did not write (another type, another format, or fields that
// do not parse) is never trusted nor overwritten: it is reported and counted, and the
// breaker decides alone until it is removed.
//
// Keys expire after a TTL (24h by default) renewed by every write.
package redisstore
