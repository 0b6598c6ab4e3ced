{
  "targets": [
    {
      "target_name": "autodidact",
      "sources": [
        "<!@(node -p \"require('fs').readdirSync('native/addon').filter(f=>f.endsWith('.cpp')).map(f=>'native/addon/'+f).join(' ')\")",
        "<!@(node -p \"require('fs').readdirSync('native/cpu').filter(f=>f.endsWith('.cpp')).map(f=>'native/cpu/'+f).join(' ')\")",
        "<!@(node -p \"require('fs').readdirSync('native/model').filter(f=>f.endsWith('.cpp')).map(f=>'native/model/'+f).join(' ')\")",
        "<!@(node -p \"require('fs').readdirSync('native/collective').filter(f=>f.endsWith('.cpp')).map(f=>'native/collective/'+f).join(' ')\")"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "native"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-O3", "-march=native", "-fexceptions", "-fno-math-errno"],
      "libraries": ["-lpthread", "-ldl"]
    }
  ]
}
