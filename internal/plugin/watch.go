package plugin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	resiliencev1alpha1 "github.com/fusebox-dev/fusebox/api/v1alpha1"
)

// ANSI escapes of the watch view.
const (
	ansiClear  = "\x1b[H\x1b[2J"
	ansiBold   = "\x1b[1m"
	ansiReset  = "\x1b[0m"
	ansiFgNone = "\x1b[39m"
)

var stateColors = map[string]string{
	string(resiliencev1alpha1.StateOpen):     "\x1b[31m", // red
	string(resiliencev1alpha1.StateHalfOpen): "\x1b[33m", // yellow
	string(resiliencev1alpha1.StateClosed):   "\x1b[32m", // green
}

const (
	// highlightFor is how long a row whose state changed stays highlighted.
	highlightFor = 10 * time.Second
	// changesShown is how many of the last state changes the view lists.
	changesShown = 5
	// refreshEvery redraws a terminal so that ages and time left move on.
	refreshEvery = 5 * time.Second
)

func newWatchCommand(o *Options) *cobra.Command {
	var noColor bool
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Watch CircuitBreakers: a live table, state changes highlighted",
		Long: `Watch the CircuitBreakers of the namespace (or of every one, with -A) and
redraw their table as they change. On a terminal, rows whose state just changed
are highlighted; otherwise (or with --no-color) each change is printed as a line
followed by the new table.`,
		Example: `  kubectl fusebox watch -n shop
  kubectl fusebox watch -A --no-color | tee breakers.log`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.watch(cmd.Context(), !noColor && isTerminal(o.Out))
		},
	}
	cmd.Flags().BoolVar(&noColor, "no-color", false, "Print plain text: no colours, no screen redraws.")
	return cmd
}

// isTerminal says whether w is a terminal, where colours and redraws belong.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// stateChange is one breaker's state change, as the watch saw it.
type stateChange struct {
	at       time.Time
	key      string
	from, to string
}

// watchView is the watch command's state: the breakers and their recent changes.
type watchView struct {
	o        *Options
	ns       string
	color    bool
	breakers map[string]Breaker
	changed  map[string]stateChange // the last change of each breaker
	changes  []stateChange          // the last changesShown, oldest first
	pending  []stateChange          // printed with the next plain-text table
	last     string                 // the last table drawn without colour
	// ready is set once every breaker is in: no partial first table.
	ready bool
}

func (o *Options) watch(ctx context.Context, color bool) error {
	ns, err := o.namespace()
	if err != nil {
		return err
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	v := &watchView{o: o, ns: ns, color: color, breakers: map[string]Breaker{}, changed: map[string]stateChange{}}
	redraw := make(chan struct{}, 1)
	poke := func() {
		select {
		case redraw <- struct{}{}:
		default:
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The follower and the drawing share v: every change goes through updates.
	updates := make(chan func(), 64)
	send := func(u func()) {
		select {
		case updates <- u:
		case <-ctx.Done():
		}
	}
	f := &follower{
		lw:      listWatch(c, func() client.ObjectList { return &resiliencev1alpha1.CircuitBreakerList{} }, client.ListOptions{Namespace: ns}),
		example: &resiliencev1alpha1.CircuitBreaker{},
		apply: func(t watch.EventType, obj runtime.Object) {
			send(func() { v.apply(t, obj) })
		},
		lost: func(err error) {
			fmt.Fprintf(o.ErrOut, "watch interrupted, catching up: %v\n", err)
		},
		// The first table is drawn once every breaker is in, even when none is.
		current: func() { send(func() { v.ready = true }) },
	}
	errc := make(chan error, 1)
	go func() { errc <- f.run(ctx) }()

	var tick <-chan time.Time
	if color {
		t := time.NewTicker(refreshEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case err := <-errc:
			return err
		case u := <-updates:
			u()
			poke()
		case <-tick:
			poke()
		case <-redraw:
			if err := v.draw(); err != nil {
				return err
			}
		}
	}
}

func (v *watchView) apply(t watch.EventType, obj runtime.Object) {
	cb, ok := obj.(*resiliencev1alpha1.CircuitBreaker)
	if !ok {
		return
	}
	now := v.o.Now()
	if t == watch.Deleted {
		delete(v.breakers, cb.Namespace+"/"+cb.Name)
		return
	}
	v.set(breakerView(cb, now), now)
}

// set records b, and its state change when it had a state before.
func (v *watchView) set(b Breaker, now time.Time) {
	key := b.Namespace + "/" + b.Name
	if old, ok := v.breakers[key]; ok && old.State != b.State {
		ch := stateChange{at: now, key: key, from: stateText(old.State), to: stateText(b.State)}
		v.changed[key] = ch
		v.changes = append(v.changes, ch)
		if len(v.changes) > changesShown {
			v.changes = v.changes[len(v.changes)-changesShown:]
		}
		v.pending = append(v.pending, ch)
	}
	v.breakers[key] = b
}

// draw writes the view: on a terminal, the screen redrawn with changed rows
// highlighted; otherwise the changes since the last table, then the table
// if it differs from the last one.
func (v *watchView) draw() error {
	if !v.ready {
		return nil
	}
	now := v.o.Now()
	bs := make([]Breaker, 0, len(v.breakers))
	for _, b := range v.breakers {
		bs = append(bs, b)
	}
	sortBreakers(bs)
	var table bytes.Buffer
	tw := printers.GetNewTabWriter(&table)
	writeTable(tw, bs, v.ns == "", false, now)
	if err := tw.Flush(); err != nil {
		return err
	}
	var out bytes.Buffer
	if v.color {
		where := "namespace " + v.ns
		if v.ns == "" {
			where = "every namespace"
		}
		fmt.Fprintf(&out, "%s%sCircuitBreakers in %s%s, %s (Ctrl-C to stop)\n\n", ansiClear, ansiBold, where, ansiReset, now.Format("15:04:05"))
		out.WriteString(v.colorize(table.String(), bs, now))
		if len(v.changes) > 0 {
			fmt.Fprintf(&out, "\n%sLast changes%s\n", ansiBold, ansiReset)
			for i := len(v.changes) - 1; i >= 0; i-- {
				ch := v.changes[i]
				fmt.Fprintf(&out, "  %s  %s  %s -> %s%s%s\n", ch.at.Format("15:04:05"), ch.key, ch.from, stateColors[ch.to], ch.to, ansiFgNone)
			}
		}
	} else {
		for _, ch := range v.pending {
			fmt.Fprintf(&out, "%s  %s: %s -> %s\n", ch.at.Format("15:04:05"), ch.key, ch.from, ch.to)
		}
		if len(v.breakers) == 0 {
			table.Reset()
			fmt.Fprintf(&table, "No CircuitBreakers yet; waiting.\n")
		}
		if table.String() != v.last || len(v.pending) > 0 {
			out.Write(table.Bytes())
			out.WriteString("\n")
			v.last = table.String()
		}
	}
	v.pending = v.pending[:0]
	_, err := v.o.Out.Write(out.Bytes())
	return err
}

// colorize paints the STATE cell of each row of table by state, and makes
// the rows whose state changed within highlightFor bold, with what it was.
func (v *watchView) colorize(table string, bs []Breaker, now time.Time) string {
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	col := strings.Index(lines[0], "STATE")
	var out strings.Builder
	out.WriteString(lines[0] + "\n")
	for i, line := range lines[1:] {
		if i >= len(bs) {
			break
		}
		b := bs[i]
		st := stateText(b.State)
		if color, ok := stateColors[b.State]; ok && col >= 0 && col < len(line) && strings.HasPrefix(line[col:], st) {
			line = line[:col] + color + st + ansiFgNone + line[col+len(st):]
		}
		key := b.Namespace + "/" + b.Name
		if ch, ok := v.changed[key]; ok && now.Sub(ch.at) < highlightFor {
			line = ansiBold + line + "  <- was " + ch.from + ansiReset
		}
		out.WriteString(line + "\n")
	}
	return out.String()
}
