package patroni

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is a program the kit started in a process group of its own, so
// that it and everything it forked are stopped together.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs path with args as the cluster's user, its output appended to
// logPath.
func (c *Cluster) start(logPath, path string, args ...string) (*process, error) {
	var cmd *exec.Cmd
	if c.runAs != nil {
		cmd = exec.Command("runuser", append([]string{"-u", c.runAs.Username, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// running reports whether the process has not exited.
func (p *process) running() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signal sends sig to the process's group.
func (p *process) signal(sig syscall.Signal) {
	if p != nil && p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

// stop sends SIGTERM to the group and, when it has not exited within
// grace, SIGKILL; it returns when the process has exited.
func (p *process) stop(grace time.Duration) {
	if !p.running() {
		p.signal(syscall.SIGKILL) // whatever of the group is left
		return
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.signal(syscall.SIGKILL)
		<-p.done
	}
	p.signal(syscall.SIGKILL)
}

// kill sends SIGKILL to the group and waits for the process to exit.
func (p *process) kill() {
	p.signal(syscall.SIGKILL)
	if p != nil {
		<-p.done
	}
}

func lookPath(name string) (string, error) { return exec.LookPath(name) }
