// Command filtercost times kube-scheduler's DRA allocator on a simulated cluster, with no API
// server: the allocator package the scheduler itself links (k8s.io/dynamic-resource-allocation
// at the scheduler's release), its feature gates at their defaults, and the scheduler's own
// sequence per pod. For every pod of a run:
//
//   - PreFilter: the allocated state cloned as the scheduler's claim tracker hands it out
//     (allocated devices, shared device ids, aggregated consumed capacity), then
//     structured.NewAllocator over every slice of the cluster;
//   - Filter: Allocate on one node after another, from where the previous pod stopped, until
//     as many feasible nodes were found as the scheduler looks for (percentageOfNodesToScore
//     left at its adaptive default, at least 100 nodes);
//   - the pod placed on one of the feasible nodes at random (its claims ask for no plain
//     resources, so every feasible node scores alike), its allocation added to the state.
//
// Reads one JSON document on stdin:
//
//	{"nodes": N, "pods": P, "seed": S, "gates": "G=true,...", "modes": [{"name": ...,
//	  "slices": [...], "classes": [...], "claims": [...]}]}
//
// where "gates" are the feature gates the release is run with beside its defaults, and "slices" are one node's ResourceSlices with the node's name spelled __NODE__ and
// "claims" the claim specs the pods take in turn. Writes one JSON line per mode: the times of
// the Allocate calls (per node), of the PreFilter work and of a pod's whole filtering, in
// microseconds of CPU, as p50 / p99 / mean, the process's CPU per pod, with the pods placed
// and the Allocate calls made.
// Single-threaded on purpose, and timed by CPU clocks (the thread's for each call, the
// process's for the whole mode): it measures the work, not the machine's parallelism or what
// else runs beside it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"sort"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"
)

type input struct {
	Nodes int         `json:"nodes"`
	Pods  int         `json:"pods"`
	Seed  int64       `json:"seed"`
	Gates string      `json:"gates"`
	Modes []modeInput `json:"modes"`
}

type modeInput struct {
	Name    string                          `json:"name"`
	Slices  []json.RawMessage               `json:"slices"`
	Classes []resourceapi.DeviceClass       `json:"classes"`
	Claims  []resourceapi.ResourceClaimSpec `json:"claims"`
}

type summary struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	Mean float64 `json:"mean"`
}

type result struct {
	Mode          string  `json:"mode"`
	Nodes         int     `json:"nodes"`
	Pods          int     `json:"pods"`
	Placed        int     `json:"placed"`
	AllocateCalls int     `json:"allocate_calls"`
	NodeUs        summary `json:"allocate_us"`
	PreFilterUs   summary `json:"prefilter_us"`
	PodUs         summary `json:"pod_filter_us"`
	// The process's CPU time over the mode's pods, the garbage collector's included, per pod.
	ProcessCPUMsPerPod float64 `json:"process_cpu_ms_per_pod"`
	Error              string  `json:"error,omitempty"`
}

type classes map[string]*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(c))
	for _, class := range c {
		out = append(out, class)
	}
	return out, nil
}

func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if class, ok := c[name]; ok {
		return class, nil
	}
	return nil, fmt.Errorf("device class %q not found", name)
}

// state is the scheduler's claim tracker reduced to what the allocator reads.
type state struct {
	devices  sets.Set[structured.DeviceID]
	shared   sets.Set[structured.SharedDeviceID]
	capacity structured.ConsumedCapacityCollection
}

// snapshot clones the three collections, as the tracker's Get, GetSharedDeviceIDs and
// Capacities do for every PreFilter.
func (s *state) snapshot() structured.AllocatedState {
	return structured.AllocatedState{
		AllocatedDevices:         s.devices.Clone(),
		AllocatedSharedDeviceIDs: s.shared.Clone(),
		AggregatedCapacity:       s.capacity.Clone(),
	}
}

// add records an allocation the way the tracker does for an allocated claim.
func (s *state) add(allocation *resourceapi.AllocationResult) {
	for _, r := range allocation.Devices.Results {
		if ptr.Deref(r.AdminAccess, false) {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID != nil {
			s.shared.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
			if r.ConsumedCapacity != nil {
				s.capacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
			}
			continue
		}
		s.devices.Insert(id)
	}
}

// feasibleToFind is the scheduler's numFeasibleNodesToFind with percentageOfNodesToScore unset.
func feasibleToFind(nodes int) int {
	const minFeasible, minPercentage = 100, 5
	if nodes < minFeasible {
		return nodes
	}
	percentage := 50 - nodes/125
	if percentage < minPercentage {
		percentage = minPercentage
	}
	n := nodes * percentage / 100
	if n < minFeasible {
		return minFeasible
	}
	return n
}

func summarize(values []time.Duration) summary {
	if len(values) == 0 {
		return summary{}
	}
	sorted := append([]time.Duration(nil), values...)
	sort.Slice(sorted, func(a, b int) bool { return sorted[a] < sorted[b] })
	var total time.Duration
	for _, v := range sorted {
		total += v
	}
	at := func(q float64) float64 {
		i := int(q*float64(len(sorted)-1) + 0.5)
		return float64(sorted[i].Nanoseconds()) / 1e3
	}
	return summary{P50: at(0.50), P99: at(0.99), Mean: float64(total.Nanoseconds()) / 1e3 / float64(len(sorted))}
}

// threadCPU is the CPU time of the calling thread (main locks itself to one): a call's work,
// whatever else the machine runs meanwhile.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}

// processCPU is the CPU time of the whole process, the garbage collector's threads included.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// defaulted applies the API server's defaults to a claim spec: an exact request with no
// allocation mode asks for exactly one device.
func defaulted(spec resourceapi.ResourceClaimSpec) resourceapi.ResourceClaimSpec {
	out := *spec.DeepCopy()
	for i := range out.Devices.Requests {
		exactly := out.Devices.Requests[i].Exactly
		if exactly == nil {
			continue
		}
		if exactly.AllocationMode == "" {
			exactly.AllocationMode = resourceapi.DeviceAllocationModeExactCount
		}
		if exactly.AllocationMode == resourceapi.DeviceAllocationModeExactCount && exactly.Count == 0 {
			exactly.Count = 1
		}
	}
	return out
}

func nodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

func run(ctx context.Context, in input, mode modeInput) (res result) {
	res = result{Mode: mode.Name, Nodes: in.Nodes, Pods: in.Pods}
	var slices []*resourceapi.ResourceSlice
	for n := 0; n < in.Nodes; n++ {
		for _, raw := range mode.Slices {
			slice := &resourceapi.ResourceSlice{}
			doc := bytes.ReplaceAll(raw, []byte("__NODE__"), []byte(nodeName(n)))
			if err := json.Unmarshal(doc, slice); err != nil {
				res.Error = fmt.Sprintf("slice of %s: %v", nodeName(n), err)
				return res
			}
			slices = append(slices, slice)
		}
	}
	lister := classes{}
	for i := range mode.Classes {
		lister[mode.Classes[i].Name] = &mode.Classes[i]
	}
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	features := dynamicresources.AllocatorFeatures(fts)
	cache := cel.NewCache(10, cel.Features{
		EnableConsumableCapacity: fts.EnableDRAConsumableCapacity,
		EnableListTypeAttributes: fts.EnableDRAListTypeAttributes,
	})
	claims := make([]resourceapi.ResourceClaimSpec, len(mode.Claims))
	for i, spec := range mode.Claims {
		claims[i] = defaulted(spec)
	}
	nodes := make([]*v1.Node, in.Nodes)
	for n := range nodes {
		nodes[n] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(n)}}
	}
	tracked := &state{
		devices:  sets.New[structured.DeviceID](),
		shared:   sets.New[structured.SharedDeviceID](),
		capacity: structured.NewConsumedCapacityCollection(),
	}
	rng := rand.New(rand.NewSource(in.Seed))
	toFind := feasibleToFind(in.Nodes)
	start := 0
	var perNode, preFilter, perPod []time.Duration
	runtime.GC()
	cpuBefore := processCPU()
	for p := 0; p < in.Pods; p++ {
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{
				Name:      fmt.Sprintf("pod-%05d-cpus", p),
				Namespace: "scale",
				UID:       types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", p)),
			},
			Spec: claims[p%len(claims)],
		}
		began := threadCPU()
		allocator, err := structured.NewAllocator(ctx, features, tracked.snapshot(), lister, slices, cache)
		if err != nil {
			res.Error = fmt.Sprintf("pod %d: new allocator: %v", p, err)
			return res
		}
		preFilter = append(preFilter, threadCPU()-began)
		var feasible []resourceapi.AllocationResult
		visited := 0
		for ; visited < in.Nodes && len(feasible) < toFind; visited++ {
			node := nodes[(start+visited)%in.Nodes]
			t := threadCPU()
			results, err := allocator.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
			perNode = append(perNode, threadCPU()-t)
			if err != nil {
				res.Error = fmt.Sprintf("pod %d on %s: %v", p, node.Name, err)
				return res
			}
			if len(results) == 1 {
				feasible = append(feasible, results[0])
			}
		}
		perPod = append(perPod, threadCPU()-began)
		res.AllocateCalls += visited
		start = (start + visited) % in.Nodes
		if len(feasible) == 0 {
			continue
		}
		chosen := feasible[rng.Intn(len(feasible))]
		tracked.add(&chosen)
		res.Placed++
	}
	res.NodeUs, res.PreFilterUs, res.PodUs = summarize(perNode), summarize(preFilter), summarize(perPod)
	res.ProcessCPUMsPerPod = float64((processCPU() - cpuBefore).Nanoseconds()) / 1e6 / float64(in.Pods)
	return res
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintf(os.Stderr, "filtercost: the input is not the expected JSON document: %v\n", err)
		os.Exit(2)
	}
	if in.Nodes <= 0 || in.Pods <= 0 || len(in.Modes) == 0 {
		fmt.Fprintln(os.Stderr, "filtercost: the input needs nodes > 0, pods > 0 and at least one mode")
		os.Exit(2)
	}
	if in.Gates != "" {
		if err := utilfeature.DefaultMutableFeatureGate.Set(in.Gates); err != nil {
			fmt.Fprintf(os.Stderr, "filtercost: feature gates %q: %v\n", in.Gates, err)
			os.Exit(2)
		}
	}
	runtime.LockOSThread() // every timed call on this thread: its CPU clock is theirs
	ctx := context.Background()
	out := json.NewEncoder(os.Stdout)
	failed := false
	for _, mode := range in.Modes {
		res := run(ctx, in, mode)
		failed = failed || res.Error != ""
		if err := out.Encode(res); err != nil {
			fmt.Fprintf(os.Stderr, "filtercost: %v\n", err)
			os.Exit(1)
		}
	}
	if failed {
		os.Exit(1)
	}
}
