/*
 * Measurement only, not part of kprof: a JVMTI agent that turns on the JVM-side features kprof's
 * engines ask for, with callbacks that do nothing (or only what the options name), so that what the
 * JVM itself pays for a capability or an event can be told apart from what kprof's code costs.
 * Used for docs/benchmarks-log.md, 2026-11-28 (session 12).
 *
 *   JDK=/usr/lib/jvm/temurin-25-jdk-amd64
 *   gcc -O2 -shared -fPIC -I$JDK/include -I$JDK/include/linux scripts/probes/jvmti-features.c -o /tmp/features.so
 *   scripts/bench workloads --only clojure --agent="-agentpath:/tmp/features.so=retransform,hook" ...
 *
 * Options (any of them, comma-separated):
 *   retransform  can_retransform_classes (what the lock engine and the rewriting engines hold)
 *   hook         ClassFileLoadHook enabled for the whole run (the lock engine's, while a session runs)
 *   monitor      can_generate_monitor_events, MonitorContendedEnter/Entered enabled
 *   prepare      ClassLoad, ClassPrepare, ThreadStart and ThreadEnd enabled (what every session enables)
 *   alloc        SampledObjectAlloc at a 512 KiB mean interval (the alloc engine's default)
 *   stack        with alloc: each allocation sample walks its thread's stack with GetStackTrace (2049 frames)
 *   hash         with alloc: each sample takes the class's identity hash and signature (kprof's label lookup)
 *   burnN        with alloc: each sample spins for N microseconds of the thread's CPU time
 */
#include <jvmti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int walk_stack, take_hash, burn_us;
static __thread jvmtiFrameInfo frames[2049];

static void JNICALL on_hook(jvmtiEnv *j, JNIEnv *e, jclass c, jobject l, const char *n, jobject pd, jint len,
                            const unsigned char *d, jint *new_len, unsigned char **new_data) {}
static void JNICALL on_class(jvmtiEnv *j, JNIEnv *e, jthread t, jclass k) {}
static void JNICALL on_thread(jvmtiEnv *j, JNIEnv *e, jthread t) {}
static void JNICALL on_monitor(jvmtiEnv *j, JNIEnv *e, jthread t, jobject o) {}

static long thread_cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void JNICALL on_alloc(jvmtiEnv *j, JNIEnv *e, jthread t, jobject o, jclass k, jlong size) {
    if (burn_us) {
        long start = thread_cpu_ns();
        while (thread_cpu_ns() - start < burn_us * 1000L) {
        }
    }
    if (walk_stack) {
        jint n;
        (*j)->GetStackTrace(j, NULL, 0, 2049, frames, &n);
    }
    if (take_hash) {
        jint hash;
        char *sig;
        (*j)->GetObjectHashCode(j, k, &hash);
        if ((*j)->GetClassSignature(j, k, &sig, NULL) == JVMTI_ERROR_NONE) (*j)->Deallocate(j, (unsigned char *)sig);
    }
}

static void enable(jvmtiEnv *j, jvmtiEvent e) { (*j)->SetEventNotificationMode(j, JVMTI_ENABLE, e, NULL); }

JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *reserved) {
    const char *o = options ? options : "";
    jvmtiEnv *j;
    if ((*vm)->GetEnv(vm, (void **)&j, JVMTI_VERSION_1_2) != JNI_OK) return 1;
    walk_stack = strstr(o, "stack") != NULL;
    take_hash = strstr(o, "hash") != NULL;
    if (strstr(o, "burn")) burn_us = atoi(strstr(o, "burn") + 4);
    jvmtiCapabilities caps;
    memset(&caps, 0, sizeof caps);
    caps.can_retransform_classes = strstr(o, "retransform") != NULL;
    caps.can_generate_monitor_events = strstr(o, "monitor") != NULL;
    caps.can_generate_sampled_object_alloc_events = strstr(o, "alloc") != NULL;
    jvmtiError err = (*j)->AddCapabilities(j, &caps);
    jvmtiEventCallbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.ClassFileLoadHook = on_hook;
    cb.ClassLoad = on_class;
    cb.ClassPrepare = on_class;
    cb.ThreadStart = on_thread;
    cb.ThreadEnd = on_thread;
    cb.MonitorContendedEnter = on_monitor;
    cb.MonitorContendedEntered = on_monitor;
    cb.SampledObjectAlloc = on_alloc;
    (*j)->SetEventCallbacks(j, &cb, sizeof cb);
    if (strstr(o, "hook")) enable(j, JVMTI_EVENT_CLASS_FILE_LOAD_HOOK);
    if (strstr(o, "prepare")) {
        enable(j, JVMTI_EVENT_CLASS_LOAD);
        enable(j, JVMTI_EVENT_CLASS_PREPARE);
        enable(j, JVMTI_EVENT_THREAD_START);
        enable(j, JVMTI_EVENT_THREAD_END);
    }
    if (strstr(o, "monitor")) {
        enable(j, JVMTI_EVENT_MONITOR_CONTENDED_ENTER);
        enable(j, JVMTI_EVENT_MONITOR_CONTENDED_ENTERED);
    }
    if (strstr(o, "alloc")) {
        (*j)->SetHeapSamplingInterval(j, 512 * 1024);
        enable(j, JVMTI_EVENT_SAMPLED_OBJECT_ALLOC);
    }
    fprintf(stderr, "jvmti-features: %s (AddCapabilities: %d)\n", o, (int)err);
    return 0;
}
