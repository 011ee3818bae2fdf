// A fake CUDA driver, NVRTC and NVML in one shared library, for testing accelsql's GPU path on
// machines without a GPU. It is NOT a GPU and its timings mean nothing; see README.md.
//
// - NVML (`nvml*`): ACCELSQL_FAKE_CUDA_DEVICES devices (default 1) named "accelsql fake CUDA
//   device", each with ACCELSQL_FAKE_CUDA_MEMORY_MIB MiB (default 1024) and a fixed UUID.
// - Driver (`cu*`): the same devices (compute capability 9.0); device memory is host memory
//   behind a guard page, counted against the device's size (so allocations beyond it fail with
//   CUDA_ERROR_OUT_OF_MEMORY), and copies are checked against the allocations they touch
//   (CUDA_ERROR_INVALID_VALUE, as the driver answers). Work enqueued on a stream runs when
//   something waits for it (see "Streams" below), in the waiting thread. A launch runs the
//   kernel on the host (fake_launch.h); a failed launch is sticky, as on a GPU.
// - NVRTC (`nvrtc*`): "compiling" builds the module for the host with the C++ compiler ($CXX,
//   else c++) and fake_kernel.h, caching the shared object by source hash; the image it returns
//   carries the source, so a module cached on disk by accelsql still loads.

#include <dlfcn.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#ifndef ACCELSQL_FAKE_CUDA_HEADER_DIR
#error "build with -DACCELSQL_FAKE_CUDA_HEADER_DIR=\"...\" (see build.sh)"
#endif

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// ---- Devices ------------------------------------------------------------------------------

constexpr int MAX_DEVICES = 8;
// Must equal FAKE_CUDA_DEVICE_NAME in gpu-scheduler: benchmarks refuse devices of this name.
constexpr const char* DEVICE_NAME = "accelsql fake CUDA device";
constexpr const char* IMAGE_MAGIC = "ACCELSQL-FAKE-CUDA";
constexpr const char* PTX_MAGIC = "// ACCELSQL-FAKE-CUDA\n";

struct Allocation {
    void* base;          // the mapping
    size_t mapped;       // its length, guard page included
    size_t size;         // bytes asked for
    int device;
};

struct Device {
    int index;
    size_t total;
    size_t used;  // guarded by `state().lock`
    unsigned char uuid[16];
};

struct State {
    std::mutex lock;
    int count;
    Device devices[MAX_DEVICES];
    std::map<uintptr_t, Allocation> allocations;  // by device pointer
    std::atomic<int> sticky{0};
    std::string sticky_message;

    State()
    {
        const char* n = getenv("ACCELSQL_FAKE_CUDA_DEVICES");
        count = n ? atoi(n) : 1;
        if (count < 0) count = 0;
        if (count > MAX_DEVICES) count = MAX_DEVICES;
        const char* m = getenv("ACCELSQL_FAKE_CUDA_MEMORY_MIB");
        long mib = m ? atol(m) : 1024;
        if (mib <= 0) mib = 1024;
        for (int i = 0; i < MAX_DEVICES; i++) {
            devices[i].index = i;
            devices[i].total = (size_t)mib << 20;
            devices[i].used = 0;
            const unsigned char uuid[16] = {0xfa, 0x6e, 0xc0, 0xda, 0x00, 0x00, 0x40, 0x00,
                                            0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                            (unsigned char)i};
            memcpy(devices[i].uuid, uuid, 16);
        }
    }
};

State& state()
{
    static State s;
    return s;
}

thread_local int current_device = -1;

size_t page_size()
{
    static size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return page;
}

// CUresult values (cuda.h).
enum : int {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_SUPPORTED = 801,
};

/// The allocation holding [ptr, ptr + n), or null.
const Allocation* find_range(uintptr_t ptr, size_t n)
{
    auto& allocations = state().allocations;
    auto it = allocations.upper_bound(ptr);
    if (it == allocations.begin()) return nullptr;
    --it;
    const uintptr_t start = it->first;
    if (ptr < start || ptr - start > it->second.size || n > it->second.size - (ptr - start)) {
        return nullptr;
    }
    return &it->second;
}

int check_device_range(uintptr_t ptr, size_t n)
{
    if (n == 0) return CUDA_SUCCESS;
    std::lock_guard<std::mutex> guard(state().lock);
    return find_range(ptr, n) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

int sticky()
{
    return state().sticky.load();
}

int alloc_device(uintptr_t* out, size_t size)
{
    if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (int e = sticky()) return e;
    const int dev = current_device;
    if (dev < 0 || dev >= state().count) return CUDA_ERROR_INVALID_CONTEXT;
    if (size == 0) return CUDA_ERROR_INVALID_VALUE;
    State& s = state();
    {
        std::lock_guard<std::mutex> guard(s.lock);
        Device& d = s.devices[dev];
        if (size > d.total - d.used) return CUDA_ERROR_OUT_OF_MEMORY;
        d.used += size;
    }
    // The allocation ends (rounded up to 256 bytes, CUDA's alignment) just before a page that
    // cannot be touched, so a kernel that runs past it faults instead of reading other memory.
    const size_t page = page_size();
    const size_t rounded = (size + 255) / 256 * 256;
    const size_t body = (rounded + page - 1) / page * page;
    const size_t mapped = body + page;
    void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        std::lock_guard<std::mutex> guard(s.lock);
        s.devices[dev].used -= size;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    mprotect(static_cast<char*>(base) + body, page, PROT_NONE);
    const uintptr_t ptr = reinterpret_cast<uintptr_t>(base) + (body - rounded);
    // Fresh device memory is not zero on a GPU: fill it so a kernel that reads what nobody
    // wrote gets noise rather than a lucky 0.
    memset(reinterpret_cast<void*>(ptr), 0xa5, rounded);
    std::lock_guard<std::mutex> guard(s.lock);
    s.allocations[ptr] = Allocation{base, mapped, size, dev};
    *out = ptr;
    return CUDA_SUCCESS;
}

int free_device(uintptr_t ptr)
{
    State& s = state();
    Allocation a;
    {
        std::lock_guard<std::mutex> guard(s.lock);
        auto it = s.allocations.find(ptr);
        if (it == s.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
        a = it->second;
        s.allocations.erase(it);
        s.devices[a.device].used -= a.size;
    }
    munmap(a.base, a.mapped);
    return CUDA_SUCCESS;
}

// ---- Modules ------------------------------------------------------------------------------

uint64_t fnv1a(const std::string& bytes)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : bytes) {
        h ^= c;
        h *= 0x100000001b3ull;
    }
    return h;
}

std::string header_dir()
{
    const char* dir = getenv("ACCELSQL_FAKE_CUDA_HEADERS");
    return dir ? dir : ACCELSQL_FAKE_CUDA_HEADER_DIR;
}

std::string build_dir()
{
    if (const char* dir = getenv("ACCELSQL_FAKE_CUDA_BUILD_DIR")) return dir;
    const char* tmp = getenv("TMPDIR");
    std::string dir = std::string(tmp ? tmp : "/tmp") + "/accelsql-fake-cuda-" +
                      std::to_string((unsigned long)getuid());
    return dir;
}

bool read_file(const std::string& path, std::string* out)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    std::ostringstream ss;
    ss << in.rdbuf();
    *out = ss.str();
    return true;
}

bool write_file(const std::string& path, const std::string& text)
{
    std::ofstream out(path, std::ios::binary);
    out << text;
    return static_cast<bool>(out);
}

/// Runs `command` (through sh) with stderr and stdout into `log`; its exit status.
int run(const std::string& command, std::string* log)
{
    const std::string log_path = build_dir() + "/log-" + std::to_string(getpid()) + "-" +
                                 std::to_string((unsigned long)pthread_self());
    const std::string full = command + " >'" + log_path + "' 2>&1";
    const int status = system(full.c_str());
    read_file(log_path, log);
    unlink(log_path.c_str());
    return status == -1 ? -1 : WEXITSTATUS(status);
}

/// Builds `source` into a host shared object (cached); its path, or "" with the compiler's
/// messages in `log`.
std::string build_module(const std::string& name, const std::string& source, std::string* log)
{
    static std::mutex build_lock;
    std::lock_guard<std::mutex> guard(build_lock);
    const std::string dir = build_dir();
    mkdir(dir.c_str(), 0700);
    // The key covers the device headers too, so editing them rebuilds every module.
    std::string headers;
    for (const char* h : {"/fake_kernel.h", "/fake_launch.h"}) {
        std::string text;
        if (!read_file(header_dir() + h, &text)) {
            *log = "cannot read " + header_dir() + h + " (set ACCELSQL_FAKE_CUDA_HEADERS)";
            return "";
        }
        headers += text;
    }
    char key[32];
    snprintf(key, sizeof key, "%016llx", (unsigned long long)fnv1a(headers + "\n" + source));
    const std::string so = dir + "/" + key + ".so";
    if (access(so.c_str(), R_OK) == 0) return so;

    const std::string tag = dir + "/" + key + "-" + std::to_string(getpid());
    const std::string cu = tag + ".cu";
    const std::string scanned = tag + ".ii";
    const std::string cpp = tag + ".cpp";
    const std::string tmp_so = tag + ".so";
    if (!write_file(cu, source)) {
        *log = "cannot write " + cu;
        return "";
    }
    const char* cxx_env = getenv("CXX");
    const std::string cxx = cxx_env && *cxx_env ? cxx_env : "c++";
    const std::string include = "-I'" + header_dir() + "'";
    // Pass 1: preprocess with __global__ as a marker to learn the kernels' names.
    std::string scan_log;
    if (run(cxx + " -std=c++17 -E -P -x c++ -DACCELSQL_FAKE_SCAN " + include +
                " -include fake_kernel.h '" + cu + "' -o '" + scanned + "'",
            &scan_log) != 0) {
        *log = scan_log;
        unlink(cu.c_str());
        return "";
    }
    std::string text;
    read_file(scanned, &text);
    unlink(scanned.c_str());
    std::vector<std::string> kernels;
    std::regex kernel(R"(extern\s+"C"\s+__accelsql_kernel__\s+void\s+([A-Za-z_]\w*)\s*\()");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), kernel);
         it != std::sregex_iterator(); ++it) {
        kernels.push_back((*it)[1]);
    }
    // Pass 2: the module, then a launcher per kernel.
    std::string unit = "#include \"fake_kernel.h\"\n#line 1 \"" + name + ".cu\"\n" + source +
                       "\n#include \"fake_launch.h\"\n";
    for (const auto& k : kernels) {
        unit += "extern \"C\" accelsql_fake::Bound* __accelsql_bind_" + k +
                "(void** p) { return accelsql_fake::bind(&" + k + ", p); }\n";
    }
    write_file(cpp, unit);
    const int status = run(cxx + " -std=c++17 -O1 -ffp-contract=off -fPIC -shared " + include +
                               " '" + cpp + "' -o '" + tmp_so + "'",
                           log);
    unlink(cu.c_str());
    unlink(cpp.c_str());
    if (status != 0) {
        unlink(tmp_so.c_str());
        return "";
    }
    if (rename(tmp_so.c_str(), so.c_str()) != 0) {
        *log = "cannot rename " + tmp_so;
        return "";
    }
    return so;
}

struct Module {
    void* handle;
};

struct Launch {
    unsigned int grid[3];
    unsigned int block[3];
    char* error;
    size_t error_size;
};

struct Bound {
    int (*run)(Bound*, const Launch*);
    void (*drop)(Bound*);
};

struct Function {
    std::string name;
    Bound* (*bind)(void**);
};

thread_local const char* launching = nullptr;

void on_fault(int sig, siginfo_t* info, void*)
{
    char message[256];
    const int n = snprintf(message, sizeof message,
                           "accelsql fake CUDA: kernel %s touched address %p outside device "
                           "memory (a GPU reports CUDA_ERROR_ILLEGAL_ADDRESS)\n",
                           launching ? launching : "(none: not in a launch)", info->si_addr);
    if (n > 0) {
        ssize_t ignored = write(2, message, (size_t)n);
        (void)ignored;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

void install_fault_reporter()
{
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_sigaction = on_fault;
        action.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigaction(SIGSEGV, &action, nullptr);
        sigaction(SIGBUS, &action, nullptr);
    });
}

// ---- NVRTC --------------------------------------------------------------------------------

struct Program {
    std::string name;
    std::string source;
    std::string log;
    std::string image;  // CUBIN or PTX, as compiled
    bool cubin = true;
};

std::string cubin_image(const std::string& source)
{
    std::string image = "\x7f" "ELF";
    image += IMAGE_MAGIC;
    uint64_t n = source.size();
    image.append(reinterpret_cast<const char*>(&n), 8);
    image += source;
    return image;
}

/// The source in a fake image (CUBIN or PTX form), or false for any other image.
bool source_of_image(const char* image, std::string* source)
{
    const size_t magic = strlen(IMAGE_MAGIC);
    if (memcmp(image, "\x7f" "ELF", 4) == 0 && memcmp(image + 4, IMAGE_MAGIC, magic) == 0) {
        uint64_t n;
        memcpy(&n, image + 4 + magic, 8);
        source->assign(image + 4 + magic + 8, n);
        return true;
    }
    if (strncmp(image, PTX_MAGIC, strlen(PTX_MAGIC)) == 0) {
        source->assign(image + strlen(PTX_MAGIC));
        return true;
    }
    return false;
}

const int ARCHS[] = {75, 80, 86, 87, 89, 90};

}  // namespace

// ---- Driver API ---------------------------------------------------------------------------

typedef int CUresult;
typedef int CUdevice;
typedef uintptr_t CUdeviceptr;
struct CUuuid {
    char bytes[16];
};

EXPORT CUresult cuInit(unsigned int) { return CUDA_SUCCESS; }

EXPORT CUresult cuDriverGetVersion(int* version)
{
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = 13000;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int* count)
{
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = state().count;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal)
{
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= state().count) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice device)
{
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    if (device < 0 || device >= state().count) return CUDA_ERROR_INVALID_DEVICE;
    memcpy(uuid->bytes, state().devices[device].uuid, 16);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice device)
{
    return cuDeviceGetUuid(uuid, device);
}

EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice device)
{
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (device < 0 || device >= state().count) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", DEVICE_NAME);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice device)
{
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (device < 0 || device >= state().count) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = state().devices[device].total;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int* value, int attribute, CUdevice device)
{
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    if (device < 0 || device >= state().count) return CUDA_ERROR_INVALID_DEVICE;
    switch (attribute) {
    case 1: *value = 1024; break;         // MAX_THREADS_PER_BLOCK
    case 2: *value = 1024; break;         // MAX_BLOCK_DIM_X
    case 3: *value = 1024; break;         // MAX_BLOCK_DIM_Y
    case 4: *value = 64; break;           // MAX_BLOCK_DIM_Z
    case 5: *value = 2147483647; break;   // MAX_GRID_DIM_X
    case 6: *value = 65535; break;        // MAX_GRID_DIM_Y
    case 7: *value = 65535; break;        // MAX_GRID_DIM_Z
    case 10: *value = 32; break;          // WARP_SIZE
    case 16: *value = 1; break;           // MULTIPROCESSOR_COUNT
    case 75: *value = 9; break;           // COMPUTE_CAPABILITY_MAJOR
    case 76: *value = 0; break;           // COMPUTE_CAPABILITY_MINOR
    case 115: *value = 0; break;          // MEMORY_POOLS_SUPPORTED: no, so cuMemAlloc/cuMemFree
    default: *value = 0; break;
    }
    return CUDA_SUCCESS;
}

// A context is its device's index + 1 (never null).
EXPORT CUresult cuDevicePrimaryCtxRetain(void** ctx, CUdevice device)
{
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    if (device < 0 || device >= state().count) return CUDA_ERROR_INVALID_DEVICE;
    *ctx = reinterpret_cast<void*>((uintptr_t)device + 1);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return CUDA_SUCCESS; }

EXPORT CUresult cuCtxSetCurrent(void* ctx)
{
    const uintptr_t id = reinterpret_cast<uintptr_t>(ctx);
    if (id == 0) {
        current_device = -1;
        return CUDA_SUCCESS;
    }
    if (id > (uintptr_t)state().count) return CUDA_ERROR_INVALID_CONTEXT;
    current_device = (int)id - 1;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(void** ctx)
{
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    *ctx = current_device < 0 ? nullptr : reinterpret_cast<void*>((uintptr_t)current_device + 1);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice* device)
{
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (current_device < 0) return CUDA_ERROR_INVALID_CONTEXT;
    *device = current_device;
    return CUDA_SUCCESS;
}

// ---- Streams ------------------------------------------------------------------------------
//
// Work enqueued on a stream runs when something waits for it (a stream or event
// synchronization, another stream waiting on one of its events, a synchronous call), not when
// it is enqueued: the latest schedule a GPU may choose, so that a host that reads results,
// reuses a pinned buffer or frees memory without waiting sees stale or missing data here as it
// could on a GPU. ACCELSQL_FAKE_CUDA_SCHEDULE chooses among legal schedules:
// - `lazy` (the default): as above; streams run in the order the host waits for them;
// - `reversed`: as lazy, but a wait first runs every *other* stream's work, newest stream
//   first, so a stream that reads what another writes without waiting for it (an event) reads
//   it before it is written;
// - `eager`: everything runs when it is enqueued (no asynchrony at all).

namespace {

struct Stream {
    std::mutex queue_lock;
    std::deque<std::function<void()>> ops;
    uint64_t enqueued = 0;  // ops ever enqueued (guarded by queue_lock)
    uint64_t executed = 0;  // ops ever run (guarded by queue_lock)
};

/// Held while ops run: one op at a time on the whole fake (a wait op runs another stream's ops
/// under it, so one lock for all streams cannot deadlock where per-stream locks could).
std::recursive_mutex run_lock;

struct Event {
    Stream* stream = nullptr;  // where it was last recorded
    uint64_t mark = 0;         // the ops of `stream` before it
};

struct Streams {
    std::mutex lock;
    std::vector<Stream*> all;  // never freed: waits may still name a destroyed stream
    Stream null_stream;
};

Streams& streams()
{
    static Streams s;
    return s;
}

enum class Schedule { Lazy, Reversed, Eager };

Schedule schedule()
{
    static const Schedule chosen = [] {
        const char* e = getenv("ACCELSQL_FAKE_CUDA_SCHEDULE");
        if (e && strcmp(e, "eager") == 0) return Schedule::Eager;
        if (e && strcmp(e, "reversed") == 0) return Schedule::Reversed;
        if (e && *e && strcmp(e, "lazy") != 0) {
            fprintf(stderr, "accelsql fake CUDA: unknown ACCELSQL_FAKE_CUDA_SCHEDULE %s, using lazy\n", e);
        }
        return Schedule::Lazy;
    }();
    return chosen;
}

Stream* stream_of(void* handle)
{
    return handle ? static_cast<Stream*>(handle) : &streams().null_stream;
}

/// Runs the ops of `s` enqueued before op number `upto`, in order.
void drain(Stream* s, uint64_t upto)
{
    std::lock_guard<std::recursive_mutex> running(run_lock);
    for (;;) {
        std::function<void()> op;
        {
            std::lock_guard<std::mutex> guard(s->queue_lock);
            if (s->executed >= upto || s->ops.empty()) return;
            op = std::move(s->ops.front());
            s->ops.pop_front();
        }
        op();
        std::lock_guard<std::mutex> guard(s->queue_lock);
        s->executed++;
    }
}

/// Runs every stream but `s`, newest first (the `reversed` schedule). A stream's work may wait
/// for `s`'s: that runs `s` only as far as the wait needs, which any schedule must.
void run_others(Stream* s)
{
    static thread_local int depth = 0;
    if (depth > 0) return;  // inside another stream's run already: keep to plain order
    depth++;
    std::vector<Stream*> all;
    {
        std::lock_guard<std::mutex> guard(streams().lock);
        all = streams().all;
    }
    all.insert(all.begin(), &streams().null_stream);
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
        if (*it != s) drain(*it, UINT64_MAX);
    }
    depth--;
}

/// What waiting for the ops of `s` before op number `upto` runs: those ops (after every other
/// stream's, in the `reversed` schedule).
void run_until(Stream* s, uint64_t upto)
{
    std::lock_guard<std::recursive_mutex> running(run_lock);
    if (schedule() == Schedule::Reversed) run_others(s);
    drain(s, upto);
}

void run_all(Stream* s)
{
    run_until(s, UINT64_MAX);
}

/// Everything enqueued anywhere (what a synchronous call, cuMemFree or cuCtxSynchronize waits for).
void run_everything()
{
    std::vector<Stream*> all;
    {
        std::lock_guard<std::mutex> guard(streams().lock);
        all = streams().all;
    }
    all.push_back(&streams().null_stream);
    for (Stream* s : all) run_all(s);
}

void enqueue(void* handle, std::function<void()> op)
{
    if (schedule() == Schedule::Eager) {
        op();
        return;
    }
    Stream* s = stream_of(handle);
    std::lock_guard<std::mutex> guard(s->queue_lock);
    s->ops.push_back(std::move(op));
    s->enqueued++;
}

// Pinned host allocations (cuMemHostAlloc): an asynchronous copy to or from one really is
// asynchronous; one from or to pageable memory is not (the driver stages it before returning).
std::mutex pinned_lock;
std::map<uintptr_t, size_t> pinned;

bool is_pinned(const void* ptr, size_t n)
{
    const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> guard(pinned_lock);
    auto it = pinned.upper_bound(p);
    if (it == pinned.begin()) return false;
    --it;
    return p >= it->first && p - it->first <= it->second && n <= it->second - (p - it->first);
}

}  // namespace

EXPORT CUresult cuCtxSynchronize()
{
    run_everything();
    return sticky();
}

EXPORT CUresult cuStreamCreate(void** stream, unsigned int)
{
    if (!stream) return CUDA_ERROR_INVALID_VALUE;
    auto* s = new Stream;
    std::lock_guard<std::mutex> guard(streams().lock);
    streams().all.push_back(s);
    *stream = s;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamCreateWithPriority(void** stream, unsigned int flags, int)
{
    return cuStreamCreate(stream, flags);
}

EXPORT CUresult cuStreamDestroy_v2(void* stream)
{
    // The stream's work still completes; its object stays for waits that name it.
    if (stream) run_all(stream_of(stream));
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize(void* stream)
{
    run_all(stream_of(stream));
    return sticky();
}

EXPORT CUresult cuStreamQuery(void* stream) { return cuStreamSynchronize(stream); }

EXPORT CUresult cuEventCreate(void** event, unsigned int)
{
    if (!event) return CUDA_ERROR_INVALID_VALUE;
    *event = new Event;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(void* event, void* stream)
{
    if (!event) return CUDA_ERROR_INVALID_HANDLE;
    if (int e = sticky()) return e;
    auto* ev = static_cast<Event*>(event);
    Stream* s = stream_of(stream);
    std::lock_guard<std::mutex> guard(s->queue_lock);
    ev->stream = s;
    ev->mark = s->enqueued;
    return CUDA_SUCCESS;
}

/// Runs what `event` waits for.
void complete(const Event* ev)
{
    if (ev->stream) run_until(ev->stream, ev->mark);
}

EXPORT CUresult cuEventSynchronize(void* event)
{
    if (!event) return CUDA_ERROR_INVALID_HANDLE;
    complete(static_cast<Event*>(event));
    return sticky();
}

// Never "not ready": the query completes the event's work (a legal schedule), so a host that
// polls cannot spin forever.
EXPORT CUresult cuEventQuery(void* event) { return cuEventSynchronize(event); }

EXPORT CUresult cuStreamWaitEvent(void* stream, void* event, unsigned int)
{
    if (!event) return CUDA_ERROR_INVALID_HANDLE;
    if (int e = sticky()) return e;
    const Event at = *static_cast<Event*>(event);  // later records do not move this wait
    enqueue(stream, [at] { complete(&at); });
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(void* event)
{
    delete static_cast<Event*>(event);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventElapsedTime(float* ms, void*, void*)
{
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    *ms = 0.0f;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total)
{
    if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
    if (current_device < 0) return CUDA_ERROR_INVALID_CONTEXT;
    std::lock_guard<std::mutex> guard(state().lock);
    const Device& d = state().devices[current_device];
    *free_bytes = d.total - d.used;
    *total = d.total;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t size) { return alloc_device(ptr, size); }

EXPORT CUresult cuMemAllocAsync(CUdeviceptr* ptr, size_t size, void*)
{
    return alloc_device(ptr, size);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr)
{
    run_everything();  // cuMemFree waits for the device
    return free_device(ptr);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr ptr, void* stream)
{
    if (int e = check_device_range(ptr, 1)) return e;
    enqueue(stream, [ptr] { free_device(ptr); });
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemHostAlloc(void** ptr, size_t size, unsigned int)
{
    if (!ptr) return CUDA_ERROR_INVALID_VALUE;
    *ptr = malloc(size ? size : 1);
    if (!*ptr) return CUDA_ERROR_OUT_OF_MEMORY;
    std::lock_guard<std::mutex> guard(pinned_lock);
    pinned[reinterpret_cast<uintptr_t>(*ptr)] = size;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocHost_v2(void** ptr, size_t size) { return cuMemHostAlloc(ptr, size, 0); }

EXPORT CUresult cuMemFreeHost(void* ptr)
{
    run_everything();  // like cuMemFreeHost, which synchronizes
    {
        std::lock_guard<std::mutex> guard(pinned_lock);
        pinned.erase(reinterpret_cast<uintptr_t>(ptr));
    }
    free(ptr);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void* stream)
{
    if (int e = sticky()) return e;
    if (int e = check_device_range(dst, n)) return e;
    if (n == 0) return CUDA_SUCCESS;
    if (is_pinned(src, n)) {
        // Read when the copy runs: a host that rewrites the buffer before then is caught.
        enqueue(stream, [dst, src, n] { memcpy(reinterpret_cast<void*>(dst), src, n); });
    } else {
        auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                          static_cast<const char*>(src) + n);
        enqueue(stream, [dst, staged] {
            memcpy(reinterpret_cast<void*>(dst), staged->data(), staged->size());
        });
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n)
{
    run_everything();
    if (int e = sticky()) return e;
    if (int e = check_device_range(dst, n)) return e;
    if (n) memcpy(reinterpret_cast<void*>(dst), src, n);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void* stream)
{
    if (int e = sticky()) return e;
    if (int e = check_device_range(src, n)) return e;
    if (n == 0) return CUDA_SUCCESS;
    if (is_pinned(dst, n)) {
        enqueue(stream, [dst, src, n] { memcpy(dst, reinterpret_cast<const void*>(src), n); });
        return CUDA_SUCCESS;
    }
    // Into pageable memory the copy is synchronous.
    run_all(stream_of(stream));
    if (int e = sticky()) return e;
    memcpy(dst, reinterpret_cast<const void*>(src), n);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n)
{
    run_everything();
    if (int e = sticky()) return e;
    if (int e = check_device_range(src, n)) return e;
    if (n) memcpy(dst, reinterpret_cast<const void*>(src), n);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void* stream)
{
    if (int e = sticky()) return e;
    if (int e = check_device_range(dst, n)) return e;
    if (int e = check_device_range(src, n)) return e;
    if (n == 0) return CUDA_SUCCESS;
    enqueue(stream, [dst, src, n] {
        memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
    });
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    if (CUresult e = cuMemcpyDtoDAsync_v2(dst, src, n, nullptr)) return e;
    run_everything();
    return sticky();
}

EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, void* stream)
{
    if (int e = sticky()) return e;
    if (int e = check_device_range(dst, n)) return e;
    if (n == 0) return CUDA_SUCCESS;
    enqueue(stream, [dst, value, n] { memset(reinterpret_cast<void*>(dst), value, n); });
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n)
{
    if (CUresult e = cuMemsetD8Async(dst, value, n, nullptr)) return e;
    run_everything();
    return sticky();
}

EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t n, void* stream)
{
    if (int e = sticky()) return e;
    if (int e = check_device_range(dst, n * 4)) return e;
    enqueue(stream, [dst, value, n] {
        unsigned int* p = reinterpret_cast<unsigned int*>(dst);
        for (size_t i = 0; i < n; i++) p[i] = value;
    });
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t n)
{
    if (CUresult e = cuMemsetD32Async(dst, value, n, nullptr)) return e;
    run_everything();
    return sticky();
}

// ---- Modules and launches -------------------------------------------------------------------

EXPORT CUresult cuModuleLoadData(void** module, const void* image)
{
    if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
    if (int e = sticky()) return e;
    std::string source;
    if (!source_of_image(static_cast<const char*>(image), &source)) {
        // A real CUBIN or PTX (e.g. from a real NVRTC's disk cache): nothing this fake can run.
        return CUDA_ERROR_INVALID_IMAGE;
    }
    std::string log;
    const std::string so = build_module("module", source, &log);
    if (so.empty()) {
        fprintf(stderr, "accelsql fake CUDA: building a module failed:\n%s\n", log.c_str());
        return CUDA_ERROR_INVALID_IMAGE;
    }
    void* handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        fprintf(stderr, "accelsql fake CUDA: %s\n", dlerror());
        return CUDA_ERROR_INVALID_IMAGE;
    }
    *module = new Module{handle};
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleUnload(void* module)
{
    run_everything();
    // The shared object stays loaded: functions taken from it may still be referenced.
    delete static_cast<Module*>(module);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(void** function, void* module, const char* name)
{
    if (!function || !module || !name) return CUDA_ERROR_INVALID_VALUE;
    const std::string symbol = std::string("__accelsql_bind_") + name;
    void* bind = dlsym(static_cast<Module*>(module)->handle, symbol.c_str());
    if (!bind) return CUDA_ERROR_NOT_FOUND;
    *function = new Function{name, reinterpret_cast<Bound* (*)(void**)>(bind)};
    return CUDA_SUCCESS;
}

EXPORT CUresult cuFuncGetAttribute(int* value, int, void*)
{
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    *value = 0;
    return CUDA_SUCCESS;
}

namespace {

/// Whether this launch of `name` is the one ACCELSQL_FAKE_CUDA_FAIL_LAUNCH=`kernel[:n]` names
/// (the n-th launch of `kernel`, counting from 1; the first when n is missing): that launch then
/// fails as a kernel that hit an illegal address would (CUDA_ERROR_LAUNCH_FAILED, sticky).
bool injected_failure(const std::string& name)
{
    static const std::pair<std::string, long> target = [] {
        const char* e = getenv("ACCELSQL_FAKE_CUDA_FAIL_LAUNCH");
        std::string spec = e ? e : "";
        long nth = 1;
        const size_t colon = spec.find(':');
        if (colon != std::string::npos) {
            nth = atol(spec.c_str() + colon + 1);
            spec.resize(colon);
        }
        return std::make_pair(spec, nth);
    }();
    if (target.first.empty() || target.first != name) return false;
    static std::atomic<long> launches{0};
    return ++launches == target.second;
}

}  // namespace

EXPORT CUresult cuLaunchKernel(void* f, unsigned int gx, unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by, unsigned int bz,
                               unsigned int shared_bytes, void* stream, void** params,
                               void** extra)
{
    if (int e = sticky()) return e;
    if (!f) return CUDA_ERROR_INVALID_HANDLE;
    if (current_device < 0) return CUDA_ERROR_INVALID_CONTEXT;
    const unsigned long long threads = (unsigned long long)bx * by * bz;
    if (gx == 0 || gy == 0 || gz == 0 || gx > 2147483647u || gy > 65535 || gz > 65535 ||
        threads == 0 || threads > 1024 || bz > 64 || shared_bytes != 0 || extra != nullptr ||
        (params == nullptr)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    install_fault_reporter();
    auto* function = static_cast<Function*>(f);
    // The parameters are copied now, as the driver does; the kernel runs when the stream does.
    Bound* bound = function->bind(params);
    const std::string name = function->name;
    const unsigned int grid[3] = {gx, gy, gz};
    const unsigned int block[3] = {bx, by, bz};
    enqueue(stream, [bound, name, grid, block] {
        if (sticky() == 0) {
            char error[512] = {0};
            Launch l{{grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, error,
                     sizeof error};
            int status = 1;
            if (injected_failure(name)) {
                snprintf(error, sizeof error, "failure injected by ACCELSQL_FAKE_CUDA_FAIL_LAUNCH");
            } else {
                launching = name.c_str();
                status = bound->run(bound, &l);
                launching = nullptr;
            }
            if (status != 0) {
                std::lock_guard<std::mutex> guard(state().lock);
                state().sticky_message = name + ": " + error;
                state().sticky.store(CUDA_ERROR_LAUNCH_FAILED);
                fprintf(stderr, "accelsql fake CUDA: launch of %s failed: %s\n", name.c_str(),
                        error);
            }
        }
        bound->drop(bound);
    });
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult error, const char** text)
{
    if (!text) return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
    case CUDA_SUCCESS: *text = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *text = "invalid argument"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *text = "out of memory"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *text = "initialization error"; break;
    case CUDA_ERROR_NO_DEVICE: *text = "no CUDA-capable device is detected"; break;
    case CUDA_ERROR_INVALID_DEVICE: *text = "invalid device ordinal"; break;
    case CUDA_ERROR_INVALID_IMAGE: *text = "device kernel image is invalid"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *text = "invalid device context"; break;
    case CUDA_ERROR_INVALID_HANDLE: *text = "invalid resource handle"; break;
    case CUDA_ERROR_NOT_FOUND: *text = "named symbol not found"; break;
    case CUDA_ERROR_LAUNCH_FAILED: *text = "unspecified launch failure"; break;
    default: *text = "unknown error"; break;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorName(CUresult error, const char** text)
{
    if (!text) return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
    case CUDA_SUCCESS: *text = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *text = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *text = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_INVALID_IMAGE: *text = "CUDA_ERROR_INVALID_IMAGE"; break;
    case CUDA_ERROR_NOT_FOUND: *text = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_LAUNCH_FAILED: *text = "CUDA_ERROR_LAUNCH_FAILED"; break;
    default: *text = "CUDA_ERROR_UNKNOWN"; break;
    }
    return CUDA_SUCCESS;
}

// ---- NVRTC --------------------------------------------------------------------------------

typedef int nvrtcResult;
enum : int {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1,
    NVRTC_ERROR_INVALID_INPUT = 3,
    NVRTC_ERROR_INVALID_PROGRAM = 4,
    NVRTC_ERROR_INVALID_OPTION = 5,
    NVRTC_ERROR_COMPILATION = 6,
};

EXPORT const char* nvrtcGetErrorString(nvrtcResult result)
{
    switch (result) {
    case NVRTC_SUCCESS: return "NVRTC_SUCCESS";
    case NVRTC_ERROR_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
    case NVRTC_ERROR_INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
    case NVRTC_ERROR_INVALID_OPTION: return "NVRTC_ERROR_INVALID_OPTION";
    case NVRTC_ERROR_COMPILATION: return "NVRTC_ERROR_COMPILATION";
    default: return "NVRTC_ERROR_INTERNAL_ERROR";
    }
}

EXPORT nvrtcResult nvrtcVersion(int* major, int* minor)
{
    if (!major || !minor) return NVRTC_ERROR_INVALID_INPUT;
    *major = 13;
    *minor = 0;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetNumSupportedArchs(int* count)
{
    if (!count) return NVRTC_ERROR_INVALID_INPUT;
    *count = (int)(sizeof ARCHS / sizeof ARCHS[0]);
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetSupportedArchs(int* archs)
{
    if (!archs) return NVRTC_ERROR_INVALID_INPUT;
    memcpy(archs, ARCHS, sizeof ARCHS);
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcCreateProgram(void** prog, const char* src, const char* name,
                                      int headers, const char* const*, const char* const*)
{
    if (!prog || !src || headers != 0) return NVRTC_ERROR_INVALID_INPUT;
    auto* p = new Program;
    p->source = src;
    p->name = name ? name : "default_program";
    *prog = p;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcDestroyProgram(void** prog)
{
    if (!prog) return NVRTC_ERROR_INVALID_INPUT;
    delete static_cast<Program*>(*prog);
    *prog = nullptr;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcCompileProgram(void* prog, int count, const char* const* options)
{
    if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
    auto* p = static_cast<Program*>(prog);
    p->cubin = false;
    for (int i = 0; i < count; i++) {
        const std::string o = options[i];
        const std::string arch = "--gpu-architecture=";
        if (o.rfind(arch, 0) == 0) {
            p->cubin = o.compare(arch.size(), 3, "sm_") == 0;
        }
    }
    std::string name = p->name;
    if (name.size() > 3 && name.compare(name.size() - 3, 3, ".cu") == 0) {
        name.resize(name.size() - 3);
    }
    if (build_module(name, p->source, &p->log).empty()) {
        return NVRTC_ERROR_COMPILATION;
    }
    p->image = p->cubin ? cubin_image(p->source) : std::string(PTX_MAGIC) + p->source;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetProgramLogSize(void* prog, size_t* size)
{
    if (!prog || !size) return NVRTC_ERROR_INVALID_INPUT;
    *size = static_cast<Program*>(prog)->log.size() + 1;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetProgramLog(void* prog, char* log)
{
    if (!prog || !log) return NVRTC_ERROR_INVALID_INPUT;
    const std::string& text = static_cast<Program*>(prog)->log;
    memcpy(log, text.c_str(), text.size() + 1);
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetCUBINSize(void* prog, size_t* size)
{
    if (!prog || !size) return NVRTC_ERROR_INVALID_INPUT;
    auto* p = static_cast<Program*>(prog);
    if (!p->cubin || p->image.empty()) return NVRTC_ERROR_INVALID_PROGRAM;
    *size = p->image.size();
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetCUBIN(void* prog, char* out)
{
    if (!prog || !out) return NVRTC_ERROR_INVALID_INPUT;
    auto* p = static_cast<Program*>(prog);
    if (!p->cubin || p->image.empty()) return NVRTC_ERROR_INVALID_PROGRAM;
    memcpy(out, p->image.data(), p->image.size());
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetPTXSize(void* prog, size_t* size)
{
    if (!prog || !size) return NVRTC_ERROR_INVALID_INPUT;
    auto* p = static_cast<Program*>(prog);
    if (p->cubin || p->image.empty()) return NVRTC_ERROR_INVALID_PROGRAM;
    *size = p->image.size() + 1;
    return NVRTC_SUCCESS;
}

EXPORT nvrtcResult nvrtcGetPTX(void* prog, char* out)
{
    if (!prog || !out) return NVRTC_ERROR_INVALID_INPUT;
    auto* p = static_cast<Program*>(prog);
    if (p->cubin || p->image.empty()) return NVRTC_ERROR_INVALID_PROGRAM;
    memcpy(out, p->image.c_str(), p->image.size() + 1);
    return NVRTC_SUCCESS;
}

// ---- NVML ---------------------------------------------------------------------------------

typedef int nvmlReturn_t;
enum : int {
    NVML_SUCCESS = 0,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
};

struct nvmlMemory_t {
    unsigned long long total, free, used;
};
struct nvmlMemory_v2_t {
    unsigned int version;
    unsigned long long total, reserved, free, used;
};
struct nvmlUtilization_t {
    unsigned int gpu, memory;
};

namespace {
const Device* nvml_device(void* handle)
{
    auto* d = static_cast<const Device*>(handle);
    const State& s = state();
    if (d < s.devices || d >= s.devices + s.count) return nullptr;
    return d;
}
}  // namespace

EXPORT nvmlReturn_t nvmlInit_v2() { return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int) { return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlShutdown() { return NVML_SUCCESS; }

EXPORT const char* nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length)
{
    if (!version || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(version, length, "accelsql-fake-cuda");
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version)
{
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = 13000;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version)
{
    return nvmlSystemGetCudaDriverVersion_v2(version);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count)
{
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)state().count;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device)
{
    if (!device || index >= (unsigned)state().count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &state().devices[index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length)
{
    const Device* d = nvml_device(device);
    if (!d || !uuid) return NVML_ERROR_INVALID_ARGUMENT;
    const unsigned char* b = d->uuid;
    const int n = snprintf(uuid, length,
                           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                           "%02x%02x%02x%02x%02x%02x",
                           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
                           b[11], b[12], b[13], b[14], b[15]);
    return n < 0 || (unsigned)n >= length ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(void* device, char* name, unsigned int length)
{
    if (!nvml_device(device) || !name) return NVML_ERROR_INVALID_ARGUMENT;
    const int n = snprintf(name, length, "%s", DEVICE_NAME);
    return n < 0 || (unsigned)n >= length ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(void* device, nvmlMemory_t* memory)
{
    const Device* d = nvml_device(device);
    if (!d || !memory) return NVML_ERROR_INVALID_ARGUMENT;
    std::lock_guard<std::mutex> guard(state().lock);
    memory->total = d->total;
    memory->used = d->used;
    memory->free = d->total - d->used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void* device, nvmlMemory_v2_t* memory)
{
    const Device* d = nvml_device(device);
    if (!d || !memory) return NVML_ERROR_INVALID_ARGUMENT;
    std::lock_guard<std::mutex> guard(state().lock);
    memory->total = d->total;
    memory->reserved = 0;
    memory->used = d->used;
    memory->free = d->total - d->used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(void* device, nvmlUtilization_t* rates)
{
    if (!nvml_device(device) || !rates) return NVML_ERROR_INVALID_ARGUMENT;
    rates->gpu = 0;
    rates->memory = 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned int* count,
                                                            void*)
{
    if (!nvml_device(device) || !count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    return NVML_SUCCESS;
}
