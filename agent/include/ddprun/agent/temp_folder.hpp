#pragma once
// The folder for temporary files that torchrun's Python uses (tempfile.gettempdir()): the first of
// $TMPDIR, $TEMP and $TMP (those set and not empty), /tmp, /var/tmp, /usr/tmp and the working
// folder in which a file can be created, made absolute. torchrun makes its log folder
// (torchelastic_*) and its watchdog's timer file there; so does ddprun, so that a job whose
// scheduler gives it a temporary folder of its own (Slurm's, a container's) leaves nothing in /tmp.
#include <filesystem>

#include "ddprun/agent/environment.hpp"

namespace ddprun::agent {

// `env`: the environment to read the variables from. Throws std::runtime_error naming every folder
// tried where none can take a file.
std::filesystem::path temp_folder(const Environment& env);

}  // namespace ddprun::agent
