#version 450
// Configure-time probe: does this glslang accept GL_EXT_integer_dot_product? (cmake/Shaders.cmake)
#extension GL_EXT_integer_dot_product : require
layout(local_size_x = 32) in;
layout(binding = 0) buffer A { int a[]; };
void main() { a[gl_GlobalInvocationID.x] = dotPacked4x8EXT(a[gl_GlobalInvocationID.x], 0x01010101); }
