// Boost.Asio's and Boost.Beast's implementation, compiled once for every
// program of this tree (BOOST_ASIO_SEPARATE_COMPILATION and
// BOOST_BEAST_SEPARATE_COMPILATION, top-level CMakeLists.txt): every other
// translation unit sees their declarations only.
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
