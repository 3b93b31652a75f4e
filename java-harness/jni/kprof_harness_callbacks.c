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
