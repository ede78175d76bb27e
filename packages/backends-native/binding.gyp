{
  "variables": {
    "torch_found%": "<!(node native/torch/torch_find.cjs found)",
    "torch_cuda%": "<!(node native/torch/torch_find.cjs cuda)"
  },
  "targets": [
    {
      "target_name": "galley_native",
      "sources": ["native/memory/addon.cc", "native/memory/cuda_probe.cc", "native/memory/cuda_memory.cc", "native/memory/shared_memory.cc", "native/memory/nvml.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra"],
      "cflags_cc!": ["-fno-exceptions"],
      "libraries": ["-ldl"]
    }
  ],
  "conditions": [
    [
      "torch_found==1",
      {
        "targets": [
          {
            "target_name": "galley_torch",
            "sources": ["native/torch/torch_addon.cc", "native/torch/torch_instance.cc", "native/torch/torch_tensors.cc", "native/torch/torch_device_tensor.cc", "native/torch/torch_graphs.cc", "native/torch/torch_direct.cc", "native/torch/torch_runner.cc", "native/torch/torch_aoti_runner.cc", "native/torch/torch_ready.cc"],
            "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
            "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS"],
            "cflags_cc": ["-std=c++17", "-fexceptions", "-frtti", "-Wall", "<!@(node native/torch/torch_find.cjs cflags)"],
            "cflags_cc!": ["-fno-exceptions", "-fno-rtti"],
            "libraries": ["<!@(node native/torch/torch_find.cjs libs)"],
            "conditions": [["torch_cuda==1", { "defines": ["GALLEY_TORCH_CUDA"] }]]
          }
        ]
      }
    ]
  ]
}
