/*
 * Measurement only, not part of kprof: can AsyncGetCallTrace walk a thread's stack from inside its
 * SampledObjectAlloc callback, and what does a walk cost there, by AsyncGetCallTrace and by JVMTI
 * GetStackTrace? kprof's alloc engine walks with GetStackTrace (docs/alloc.md); this answers why.
 * Used for docs/benchmarks-log.md, 2026-11-28 (session 12).
 *
 *   JDK=/usr/lib/jvm/temurin-25-jdk-amd64
 *   gcc -O2 -shared -fPIC -I$JDK/include -I$JDK/include/linux scripts/probes/alloc-walk.c -o /tmp/alloc-walk.so -ldl
 *   $JDK/bin/java -agentpath:/tmp/alloc-walk.so -cp <harness classes> kprof.harness.AllocSplit
 *
 * At each allocation sample it calls AsyncGetCallTrace (null context: from the thread's last Java
 * frame), then GetStackTrace, times both on the thread's CPU clock, and prints at exit how many walks
 * AsyncGetCallTrace made, the codes of those it refused, whether the thread's frame anchor was
 * walkable (its last Java pc set: HotSpot's JavaThread::_anchor, offsets from its structure table),
 * and the frames and microseconds per walk of each way. It reads the anchor and changes nothing.
 */
#include <dlfcn.h>
#include <jvmti.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct { jint bci; jmethodID method; } CallFrame;
typedef struct { JNIEnv *env; jint num_frames; CallFrame *frames; } CallTrace;
typedef void (*AsgctFn)(CallTrace *, jint, void *);

static AsgctFn asgct;
static long anchor_off = -1, pc_off = -1;
static jfieldID eetop;
static long samples, by_asgct, anchor_walkable, refused[16], asgct_frames, asgct_ns, jvmti_frames, jvmti_ns;
static __thread CallFrame call_frames[2049];
static __thread jvmtiFrameInfo frame_info[2049];

static long thread_cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void read_structure_table(void) {
    void *jvm = dlopen("libjvm.so", RTLD_NOW | RTLD_NOLOAD);
    char **table = *(char ***)dlsym(jvm, "gHotSpotVMStructs");
    uint64_t type_at = *(uint64_t *)dlsym(jvm, "gHotSpotVMStructEntryTypeNameOffset");
    uint64_t field_at = *(uint64_t *)dlsym(jvm, "gHotSpotVMStructEntryFieldNameOffset");
    uint64_t offset_at = *(uint64_t *)dlsym(jvm, "gHotSpotVMStructEntryOffsetOffset");
    uint64_t stride = *(uint64_t *)dlsym(jvm, "gHotSpotVMStructEntryArrayStride");
    for (char *e = (char *)table; *(char **)(e + type_at); e += stride) {
        const char *type = *(char **)(e + type_at), *field = *(char **)(e + field_at);
        if (!field) continue;
        if (!strcmp(type, "JavaThread") && !strcmp(field, "_anchor")) anchor_off = *(uint64_t *)(e + offset_at);
        if (!strcmp(type, "JavaFrameAnchor") && !strcmp(field, "_last_Java_pc")) pc_off = *(uint64_t *)(e + offset_at);
    }
    asgct = (AsgctFn)dlsym(jvm, "AsyncGetCallTrace");
}

static void JNICALL on_alloc(jvmtiEnv *j, JNIEnv *env, jthread thread, jobject o, jclass k, jlong size) {
    __sync_fetch_and_add(&samples, 1);
    CallTrace trace = {env, 0, call_frames};
    long t0 = thread_cpu_ns();
    asgct(&trace, 2049, NULL);
    long t1 = thread_cpu_ns();
    if (trace.num_frames > 0) {
        __sync_fetch_and_add(&by_asgct, 1);
        __sync_fetch_and_add(&asgct_frames, trace.num_frames);
        __sync_fetch_and_add(&asgct_ns, t1 - t0);
    } else if (-trace.num_frames < 16) {
        __sync_fetch_and_add(&refused[-trace.num_frames], 1);
    }
    char *java_thread = (char *)(intptr_t)(*env)->GetLongField(env, thread, eetop);
    if (java_thread && anchor_off >= 0 && pc_off >= 0 && *(void **)(java_thread + anchor_off + pc_off))
        __sync_fetch_and_add(&anchor_walkable, 1);
    jint n = 0;
    long t2 = thread_cpu_ns();
    (*j)->GetStackTrace(j, NULL, 0, 2049, frame_info, &n);
    long t3 = thread_cpu_ns();
    __sync_fetch_and_add(&jvmti_frames, n);
    __sync_fetch_and_add(&jvmti_ns, t3 - t2);
}

static void JNICALL on_class(jvmtiEnv *j, JNIEnv *e, jthread t, jclass k) {}

static void JNICALL on_class_prepare(jvmtiEnv *j, JNIEnv *e, jthread t, jclass k) {
    /* jmethodIDs for every method, as kprof makes them: AsyncGetCallTrace names methods by them. */
    jint n;
    jmethodID *methods;
    if ((*j)->GetClassMethods(j, k, &n, &methods) == JVMTI_ERROR_NONE) (*j)->Deallocate(j, (unsigned char *)methods);
}

static void JNICALL on_vm_init(jvmtiEnv *j, JNIEnv *env, jthread t) {
    eetop = (*env)->GetFieldID(env, (*env)->FindClass(env, "java/lang/Thread"), "eetop", "J");
    read_structure_table();
    (*j)->SetHeapSamplingInterval(j, 512 * 1024);
    (*j)->SetEventNotificationMode(j, JVMTI_ENABLE, JVMTI_EVENT_SAMPLED_OBJECT_ALLOC, NULL);
}

static void JNICALL on_vm_death(jvmtiEnv *j, JNIEnv *env) {
    fprintf(stderr, "alloc-walk: samples=%ld asgct_walks=%ld anchor_walkable=%ld refused:", samples, by_asgct,
            anchor_walkable);
    for (int i = 0; i < 16; i++)
        if (refused[i]) fprintf(stderr, " %d:%ld", -i, refused[i]);
    fprintf(stderr, "\nalloc-walk: asgct %.1f frames %.2f us per walk; jvmti %.1f frames %.2f us per walk\n",
            by_asgct ? (double)asgct_frames / by_asgct : 0, by_asgct ? asgct_ns / 1000.0 / by_asgct : 0,
            samples ? (double)jvmti_frames / samples : 0, samples ? jvmti_ns / 1000.0 / samples : 0);
}

JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *reserved) {
    jvmtiEnv *j;
    if ((*vm)->GetEnv(vm, (void **)&j, JVMTI_VERSION_1_2) != JNI_OK) return 1;
    jvmtiCapabilities caps;
    memset(&caps, 0, sizeof caps);
    caps.can_generate_sampled_object_alloc_events = 1;
    (*j)->AddCapabilities(j, &caps);
    jvmtiEventCallbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.SampledObjectAlloc = on_alloc;
    cb.VMInit = on_vm_init;
    cb.VMDeath = on_vm_death;
    cb.ClassLoad = on_class;
    cb.ClassPrepare = on_class_prepare;
    (*j)->SetEventCallbacks(j, &cb, sizeof cb);
    (*j)->SetEventNotificationMode(j, JVMTI_ENABLE, JVMTI_EVENT_VM_INIT, NULL);
    (*j)->SetEventNotificationMode(j, JVMTI_ENABLE, JVMTI_EVENT_VM_DEATH, NULL);
    /* AsyncGetCallTrace refuses to walk without ClassLoad events enabled. */
    (*j)->SetEventNotificationMode(j, JVMTI_ENABLE, JVMTI_EVENT_CLASS_LOAD, NULL);
    (*j)->SetEventNotificationMode(j, JVMTI_ENABLE, JVMTI_EVENT_CLASS_PREPARE, NULL);
    return 0;
}
