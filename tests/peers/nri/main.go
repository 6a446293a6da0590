// nri-runtime runs the genuine runtime side of NRI (github.com/containerd/nri pkg/adaptation)
// on a unix socket and lets a test drive it: one JSON command per line on stdin, one JSON
// answer per line on stdout. It stands where containerd or CRI-O would: plugins connect to
// the socket, register, are configured and synchronized, then see container lifecycle calls.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

type command struct {
	Op        string   `json:"op"`
	Pod       string   `json:"pod,omitempty"`
	ID        string   `json:"id,omitempty"`
	Name      string   `json:"name,omitempty"`
	Namespace string   `json:"namespace,omitempty"`
	UID       string   `json:"uid,omitempty"`
	Env       []string `json:"env,omitempty"`
	CPUs      string   `json:"cpus,omitempty"`
	TimeoutMs int      `json:"timeout_ms,omitempty"`
}

type update struct {
	ID   string `json:"id"`
	CPUs string `json:"cpus"`
}

type answer struct {
	OK          bool              `json:"ok"`
	Error       string            `json:"error,omitempty"`
	AdjustCPUs  string            `json:"adjust_cpus,omitempty"`
	Updates     []update          `json:"updates,omitempty"`
	CPUs        map[string]string `json:"cpus,omitempty"`
	NRIVersion  string            `json:"nri_version,omitempty"`
	SyncCount   int               `json:"sync_count,omitempty"`
	SyncUpdates []update          `json:"sync_updates,omitempty"`
	Unsolicited [][]update        `json:"unsolicited,omitempty"`
}

type runtimeState struct {
	sync.Mutex
	socket      string
	name        string
	version     string
	pods        map[string]*api.PodSandbox
	containers  map[string]*api.Container
	order       []string
	nri         *adaptation.Adaptation
	syncCount   int
	syncUpdates []update
	syncedC     chan struct{}
	unsolicited [][]update
}

func toUpdates(in []*api.ContainerUpdate) []update {
	out := []update{}
	for _, u := range in {
		cpus := ""
		if u.GetLinux().GetResources().GetCpu() != nil {
			cpus = u.Linux.Resources.Cpu.Cpus
		}
		out = append(out, update{ID: u.ContainerId, CPUs: cpus})
	}
	return out
}

// apply records updated cpusets; the caller holds the lock.
func (s *runtimeState) apply(in []*api.ContainerUpdate) []*api.ContainerUpdate {
	failed := []*api.ContainerUpdate{}
	for _, u := range in {
		c, ok := s.containers[u.ContainerId]
		if !ok {
			if !u.IgnoreFailure {
				failed = append(failed, u)
			}
			continue
		}
		if cpu := u.GetLinux().GetResources().GetCpu(); cpu != nil && cpu.Cpus != "" {
			setCPUs(c, cpu.Cpus)
		}
	}
	return failed
}

func setCPUs(c *api.Container, cpus string) {
	if c.Linux == nil {
		c.Linux = &api.LinuxContainer{}
	}
	if c.Linux.Resources == nil {
		c.Linux.Resources = &api.LinuxResources{}
	}
	if c.Linux.Resources.Cpu == nil {
		c.Linux.Resources.Cpu = &api.LinuxCPU{}
	}
	c.Linux.Resources.Cpu.Cpus = cpus
}

func cpusOf(c *api.Container) string {
	if c.GetLinux().GetResources().GetCpu() == nil {
		return ""
	}
	return c.Linux.Resources.Cpu.Cpus
}

func (s *runtimeState) syncFn(ctx context.Context, cb adaptation.SyncCB) error {
	s.Lock()
	defer s.Unlock()
	pods := []*api.PodSandbox{}
	for _, p := range s.pods {
		pods = append(pods, p)
	}
	ctrs := []*api.Container{}
	for _, id := range s.order {
		if c, ok := s.containers[id]; ok {
			ctrs = append(ctrs, c)
		}
	}
	updates, err := cb(ctx, pods, ctrs)
	if err != nil {
		return err
	}
	s.apply(updates)
	s.syncCount++
	s.syncUpdates = toUpdates(updates)
	select {
	case s.syncedC <- struct{}{}:
	default:
	}
	return nil
}

func (s *runtimeState) updateFn(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	s.Lock()
	defer s.Unlock()
	s.unsolicited = append(s.unsolicited, toUpdates(updates))
	return s.apply(updates), nil
}

func (s *runtimeState) start() error {
	dir := filepath.Dir(s.socket)
	r, err := adaptation.New(s.name, s.version, s.syncFn, s.updateFn,
		adaptation.WithSocketPath(s.socket),
		adaptation.WithPluginPath(filepath.Join(dir, "no-plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "no-plugin-config")),
	)
	if err != nil {
		return err
	}
	if err := r.Start(); err != nil {
		return err
	}
	// Start() runs one sync for pre-installed plugins (there are none): not a plugin's.
	s.Lock()
	s.syncCount = 0
	s.syncUpdates = nil
	s.Unlock()
	for len(s.syncedC) > 0 {
		<-s.syncedC
	}
	s.nri = r
	return nil
}

func nriVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/containerd/nri" {
				return m.Version
			}
		}
	}
	return "unknown"
}

func (s *runtimeState) handle(cmd command) answer {
	ctx := context.Background()
	switch cmd.Op {
	case "start":
		if err := s.start(); err != nil {
			return answer{Error: err.Error()}
		}
		return answer{OK: true, NRIVersion: nriVersion()}
	case "restart":
		s.nri.Stop()
		if err := s.start(); err != nil {
			return answer{Error: err.Error()}
		}
		return answer{OK: true}
	case "wait_plugin":
		timeout := time.Duration(cmd.TimeoutMs) * time.Millisecond
		if timeout == 0 {
			timeout = 10 * time.Second
		}
		select {
		case <-s.syncedC:
		case <-time.After(timeout):
			return answer{Error: "no plugin synchronized in time"}
		}
		// Admission finishes after the sync callback returns; this waits for it.
		s.nri.BlockPluginSync().Unblock()
		s.Lock()
		defer s.Unlock()
		return answer{OK: true, SyncCount: s.syncCount, SyncUpdates: s.syncUpdates}
	case "add_pod":
		s.Lock()
		defer s.Unlock()
		s.pods[cmd.Pod] = &api.PodSandbox{Id: cmd.Pod, Name: cmd.Name, Namespace: cmd.Namespace, Uid: cmd.UID}
		return answer{OK: true}
	case "add_existing":
		// A container that already runs (created before the plugin connected).
		s.Lock()
		defer s.Unlock()
		c := &api.Container{Id: cmd.ID, PodSandboxId: cmd.Pod, Name: cmd.Name, Env: cmd.Env,
			State: api.ContainerState_CONTAINER_RUNNING}
		setCPUs(c, cmd.CPUs)
		s.containers[cmd.ID] = c
		s.order = append(s.order, cmd.ID)
		return answer{OK: true}
	case "create":
		s.Lock()
		defer s.Unlock()
		pod := s.pods[cmd.Pod]
		c := &api.Container{Id: cmd.ID, PodSandboxId: cmd.Pod, Name: cmd.Name, Env: cmd.Env,
			State: api.ContainerState_CONTAINER_CREATED}
		rpl, err := s.nri.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: c})
		if err != nil {
			return answer{Error: err.Error()}
		}
		a := answer{OK: true, Updates: toUpdates(rpl.Update)}
		if cpu := rpl.GetAdjust().GetLinux().GetResources().GetCpu(); cpu != nil {
			a.AdjustCPUs = cpu.Cpus
			setCPUs(c, cpu.Cpus)
		}
		c.State = api.ContainerState_CONTAINER_RUNNING
		s.containers[cmd.ID] = c
		s.order = append(s.order, cmd.ID)
		s.apply(rpl.Update)
		return a
	case "stop":
		s.Lock()
		defer s.Unlock()
		c := s.containers[cmd.ID]
		rpl, err := s.nri.StopContainer(ctx, &api.StopContainerRequest{Pod: s.pods[c.PodSandboxId], Container: c})
		if err != nil {
			return answer{Error: err.Error()}
		}
		c.State = api.ContainerState_CONTAINER_STOPPED
		s.apply(rpl.Update)
		return answer{OK: true, Updates: toUpdates(rpl.Update)}
	case "remove":
		s.Lock()
		defer s.Unlock()
		c := s.containers[cmd.ID]
		if err := removeContainer(ctx, s.nri, s.pods[c.PodSandboxId], c); err != nil {
			return answer{Error: err.Error()}
		}
		delete(s.containers, cmd.ID)
		return answer{OK: true}
	case "cpus":
		s.Lock()
		defer s.Unlock()
		out := map[string]string{}
		for id, c := range s.containers {
			out[id] = cpusOf(c)
		}
		return answer{OK: true, CPUs: out}
	case "unsolicited":
		s.Lock()
		defer s.Unlock()
		return answer{OK: true, Unsolicited: s.unsolicited}
	case "quit":
		if s.nri != nil {
			s.nri.Stop()
		}
		return answer{OK: true}
	}
	return answer{Error: fmt.Sprintf("unknown op %q", cmd.Op)}
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: nri-runtime SOCKET RUNTIME-NAME RUNTIME-VERSION")
		os.Exit(2)
	}
	s := &runtimeState{
		socket:     os.Args[1],
		name:       os.Args[2],
		version:    os.Args[3],
		pods:       map[string]*api.PodSandbox{},
		containers: map[string]*api.Container{},
		syncedC:    make(chan struct{}, 16),
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var cmd command
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			out.Encode(answer{Error: "bad command: " + err.Error()})
			continue
		}
		a := s.handle(cmd)
		if a.Updates != nil {
			sort.Slice(a.Updates, func(i, j int) bool { return a.Updates[i].ID < a.Updates[j].ID })
		}
		out.Encode(a)
		if cmd.Op == "quit" {
			return
		}
	}
}
