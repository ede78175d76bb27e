{
  "targets": [
    {
      "target_name": "galley_native",
      "sources": ["native/addon.cc", "native/cuda_probe.cc", "native/shared_memory.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra"],
      "cflags_cc!": ["-fno-exceptions"],
      "libraries": ["-ldl"]
    }
  ]
}
