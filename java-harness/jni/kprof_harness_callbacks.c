/* JNI side of kprof.harness.NativeCallbacks: native code that calls back into Java, so tests can check
 * that bytecode and exact modes keep calling contexts right across native frames. Built by build.rs into
 * libkprof_harness_callbacks.so. */
#include <jni.h>

JNIEXPORT jlong JNICALL Java_kprof_harness_NativeCallbacks_callUp(JNIEnv *env, jclass cls, jobject target, jint depth) {
    (void)cls;
    jclass k = (*env)->GetObjectClass(env, target);
    jmethodID up = (*env)->GetMethodID(env, k, "up", "(I)J");
    if (up == NULL) {
        return 0;
    }
    /* An exception thrown by up() stays pending and propagates to the Java caller when this returns. */
    return (*env)->CallLongMethod(env, target, up, depth);
}

/* Calls thrower.up(depth), which throws at its bottom, catches that here in native code (ExceptionClear,
 * or ExceptionDescribe, which prints and clears), then calls NativeCallbacks.afterCatch(n) back: that call
 * must hang below this native method, not below the frame that threw. */
JNIEXPORT jlong JNICALL Java_kprof_harness_NativeCallbacks_catchThenCall(JNIEnv *env, jclass cls, jobject thrower, jint depth,
                                                                         jboolean describe) {
    jclass k = (*env)->GetObjectClass(env, thrower);
    jmethodID up = (*env)->GetMethodID(env, k, "up", "(I)J");
    jmethodID after = (*env)->GetStaticMethodID(env, cls, "afterCatch", "(I)J");
    if (up == NULL || after == NULL) {
        return 0;
    }
    jlong r = (*env)->CallLongMethod(env, thrower, up, depth);
    if ((*env)->ExceptionCheck(env)) {
        if (describe) {
            (*env)->ExceptionDescribe(env);
        } else {
            (*env)->ExceptionClear(env);
        }
        r = 1000;
    }
    return r + (*env)->CallStaticLongMethod(env, cls, after, 2000);
}
