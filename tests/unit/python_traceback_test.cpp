// The exception a Python worker died of, read back from the end of its stderr.
#include <catch2/catch.hpp>

#include "logs/python_traceback.hpp"

using namespace ddprun::agent;

TEST_CASE("python traceback: the last one in the output, frames and exception apart", "[summary]") {
  const auto tb = last_python_traceback(
      "step 1\n"
      "Traceback (most recent call last):\n"
      "  File \"/t/a.py\", line 3, in <module>\n"
      "    x()\n"
      "KeyError: 'first'\n"
      "\n"
      "During handling of the above exception, another exception occurred:\n"
      "\n"
      "Traceback (most recent call last):\n"
      "  File \"/t/a.py\", line 9, in load_batch\n"
      "    raise ValueError(\"bad batch shape\")\n"
      "    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
      "ValueError: bad batch shape\n"
      "[W ProcessGroup] shutting down\n");
  REQUIRE(tb);
  CHECK(tb->exception == "ValueError: bad batch shape");
  CHECK(tb->traceback ==
        "Traceback (most recent call last):\n"
        "  File \"/t/a.py\", line 9, in load_batch\n"
        "    raise ValueError(\"bad batch shape\")\n"
        "    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^");
}

TEST_CASE("python traceback: none, cut off, or only quoted in a line", "[summary]") {
  CHECK_FALSE(last_python_traceback(""));
  CHECK_FALSE(last_python_traceback("loss 0.1\nloss 0.05\n"));
  CHECK_FALSE(last_python_traceback("Traceback (most recent call last):\n  File \"a.py\", line 1"));
  CHECK_FALSE(last_python_traceback("log: Traceback (most recent call last): quoted\nok\n"));
}
