package testbin

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPathIsTheCachedExecutable: Path gives a program that runs, and the same one again
// while nothing changed (the point: a second suite links nothing).
func TestPathIsTheCachedExecutable(t *testing.T) {
	first, err := Path(Fuseboxd)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Path(Fuseboxd)
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Errorf("Path gave %s, then %s: want the cached executable both times", first, again)
	}
	out, err := exec.Command(first, "probe", "--socket", t.TempDir()+"/none.sock").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "none.sock") {
		t.Errorf("%s probe on no daemon: %v %s, want fuseboxd's refusal naming the socket", first, err, out)
	}
}

func TestPathOfNoCommandSaysWhy(t *testing.T) {
	_, err := Path("github.com/fusebox-dev/fusebox/cmd/no-such-command")
	if err == nil || !strings.Contains(err.Error(), "no-such-command") {
		t.Errorf("Path of a missing package: %v, want an error naming it", err)
	}
}
