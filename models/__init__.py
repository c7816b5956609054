"""Getting and running models: hardware and llama.cpp backends, Hub, library, engine.

Qt-free. The engine (llama.cpp) runs in a child process so that a native crash never
takes the application with it.
"""
